#!/usr/bin/env bash
# The GPU check in one command (dev/gpu_check.md says what it measures and how to read it).
#
#   dev/gpu_check.sh [--device cuda|cpu] [--tiny] [OUTDIR]     (OUTDIR default: $OUT)
#
# Writes into OUTDIR: tests.log (tests/core/test_cuda.py in float32 and bfloat16),
# costs-1.5b.json and costs-7b.json (`specbench costs --random-weights`, bfloat16, beside the
# 0.5B-shaped drafter), graphs.json and costs-graphed-1.5b.json, costs-graphed-7b.json
# (dev/gpu_graphs.py: forwards over DynamicCache, StaticCache and CUDA graphs, and the costs
# re-priced at the fastest), gpu_check.json (parity with each mismatch's logit gap, the sweep
# against HF assisted, attention with and without cuDNN), profile.txt (one round under
# torch.profiler) and log.txt (all output).
# --device cpu --tiny is the dry run CI takes (tests/dev/test_gpu_check.py): tiny shapes.
set -euo pipefail

device=cuda
tiny=
out=${OUT:-}
while [ $# -gt 0 ]; do
    case $1 in
        --device) device=$2; shift 2 ;;
        --tiny) tiny=--tiny; shift ;;
        -h | --help) sed -n 2,10p "$0"; exit 0 ;;
        *) out=$1; shift ;;
    esac
done
[ -n "$out" ] || { echo "give an output folder (or set OUT)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
configs=$(mktemp -d)
own_cache=
if [ -z "${SPECBENCH_CACHE:-}" ]; then
    own_cache=$(mktemp -d)
    export SPECBENCH_CACHE=$own_cache
fi
trap 'rm -rf "$configs" ${own_cache:+"$own_cache"}' EXIT
exec > >(tee "$out/log.txt") 2>&1

python3 dev/gpu_check.py configs "$configs" $tiny
draft_layers=4
[ -n "$tiny" ] && draft_layers=2
repeats=3
[ -n "$tiny" ] && repeats=1

echo "== tests/core/test_cuda.py, float32 and bfloat16"
for dtype in float32 bfloat16; do
    SPECBENCH_CUDA_DTYPE=$dtype python3 -m pytest -q -p no:cacheprovider -rs tests/core/test_cuda.py \
        >> "$out/tests.log" 2>&1 || echo "test_cuda.py ($dtype) failed: see tests.log"
done
tail -n 3 "$out/tests.log"

echo "== specbench costs --random-weights, bfloat16"
for size in 1.5b 7b; do
    python3 -c "from specbench.cli import app; app()" costs --random-weights --device "$device" --dtype bfloat16 --draft-dtype bfloat16 \
        --kernels default --target "$configs/qwen2-$size" --drafter-model "$configs/qwen2-0.5b" \
        --timing-repeats $repeats --out "$out/costs-$size.json"
done

echo "== forwards over DynamicCache, StaticCache and CUDA graphs"
graph_args=(--device "$device")
[ -n "$tiny" ] && graph_args+=(--tiny --repeats 1 --context 24)
python3 dev/gpu_graphs.py measure "$out" "${graph_args[@]}" || echo "gpu_graphs.py failed: see log.txt"

echo "== parity, sweep against HF assisted, profile"
args=(--device "$device" --draft-layers $draft_layers)
[ -n "$tiny" ] && args+=(--repeats 1 --parity-tokens 12 --max-new-tokens 24)
python3 dev/gpu_check.py run "$out" $tiny "${args[@]}"
