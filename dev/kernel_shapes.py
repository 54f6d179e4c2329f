"""specbench's native kernels at the default pair's shapes, with random weights: no model needed.

Why: the real pair is 2.6 GB of packages that a borrowed machine (a CPU of another kind, an
accelerator host with no registry) may not have. Random weights of the same shapes stream the
same bytes through the same kernels, so this compares CPUs and instruction sets (AVX2 against
AVX-512 VNNI) where `dev/target_step.py` and `dev/drafter_step.py` cannot run. It times
the kernels alone: no attention, norms or head processing, so a whole step costs more.

Median of --repeats, each over every layer (their weights all distinct, so they stream from
memory as in a real step):
  - the target's 28 decoder layers (Qwen2.5-1.5B: q, k, v, o, gate, up, down) as its Q4_K_M
    file holds them (Q4_K blocks through q4k_linear.c; v and down of 14 layers, chosen by
    llama.cpp's rule, as Q6_K blocks through q6k_linear.c), and its Q6_K output head, for
    each of --rows;
  - the drafter's 24 layers (Qwen2.5-0.5B) as int8 rows (bf16 in, bf16 scales) through
    int8_gemv.c (AVX512-VNNI, where built), int8_linear.c (AVX2) and PyTorch's int8 kernel,
    and as Q4_K blocks, for 1, 2 and 4 rows.
All on one core set by the caller: `taskset -c 0,1 env OMP_NUM_THREADS=2 python ...`.

    python dev/kernel_shapes.py [--repeats 5] [--rows 1,2,3,4,5,8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from common import machine_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from gguf_tiny import random_q4k, random_q6k  # noqa: E402  (valid random block bytes, shared with the tests)

from specbench.speed import quantize  # noqa: E402
from specbench.speed.gguf_blocks import QK, Q4KLinear, Q6KLinear, repack, repack_q6k  # noqa: E402

# (hidden, intermediate, key/value width, layers, vocabulary) of the default pair
TARGET = (1536, 8960, 256, 28, 151936)
DRAFTER = (896, 4864, 128, 24, 151936)


def layer_shapes(hidden: int, intermediate: int, kv: int) -> list[tuple[int, int]]:
    """(out, in) of one decoder layer's seven Linears: q, k, v, o, gate, up, down."""
    return [
        (hidden, hidden),
        (kv, hidden),
        (kv, hidden),
        (hidden, hidden),
        (intermediate, hidden),
        (intermediate, hidden),
        (hidden, intermediate),
    ]


def q4k_layers(model: tuple, seed: int) -> list[Q4KLinear]:
    hidden, intermediate, kv, layers, _ = model
    shapes = layer_shapes(hidden, intermediate, kv)
    return [
        Q4KLinear(repack(random_q4k(out, -(-cols // QK) * QK, seed=seed + n)), None, in_features=cols)
        for n, (out, cols) in enumerate(shapes * layers)
    ]


def more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the layers whose attn_v and ffn_down a Q4_K_M file keeps in Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_layers(model: tuple, seed: int) -> list:
    """The decoder's Linears as a Q4_K_M file holds them: v and down of more_bits layers Q6_K."""
    hidden, intermediate, kv, layers, _ = model
    out = []
    for i in range(layers):
        for j, (rows, cols) in enumerate(layer_shapes(hidden, intermediate, kv)):
            n = seed + i * 7 + j
            six = j in (2, 6) and more_bits(i, layers)
            out.append(
                Q6KLinear(repack_q6k(random_q6k(rows, cols, seed=n)), None)
                if six
                else Q4KLinear(repack(random_q4k(rows, cols, seed=n)), None)
            )
    return out


def median_ms(call, repeats: int) -> float:
    call()  # warm: builds the kernels, touches the weights
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def target(repeats: int, rows: list[int]) -> None:
    hidden = TARGET[0]
    layers = q4_k_m_layers(TARGET, seed=0)
    head = Q6KLinear(repack_q6k(random_q6k(TARGET[4], hidden, seed=99_999)), None)
    for n in rows:
        x = {width: torch.randn(n, width) for width in {layer.in_features for layer in layers}}
        body = median_ms(lambda x=x: [layer(x[layer.in_features]) for layer in layers], repeats)
        top = median_ms(lambda x=x: head(x[hidden]), repeats)
        print(f"target, {n} row(s): Q4_K_M layers {body:7.2f} ms   Q6_K head {top:6.2f} ms", flush=True)


def drafter(repeats: int) -> None:
    hidden, intermediate, kv, count, _ = DRAFTER
    weights = [
        (torch.randint(-127, 128, shape, dtype=torch.int8), (torch.rand(shape[0]) * 0.01).bfloat16())
        for shape in layer_shapes(hidden, intermediate, kv) * count
    ]
    blocks = q4k_layers(DRAFTER, seed=10_000)
    ways = {
        "int8 (int8_gemv where built)": quantize.fast_int8_linear,
        "int8 (int8_linear)": quantize.native_int8_linear,
        "int8 (PyTorch)": quantize.int8_linear,
    }
    for n in (1, 2, 4):
        x = {width: torch.randn(n, width).bfloat16() for width in (hidden, intermediate)}

        def run_all(way, x=x):
            return [way(x[q.shape[1]], q, s, None) for q, s in weights]

        cells = [f"{name} {median_ms(lambda way=way: run_all(way), repeats):6.2f}" for name, way in ways.items()]
        xf = {width: t.float() for width, t in x.items()}
        cells.append(
            f"Q4_K {median_ms(lambda xf=xf: [layer(xf[layer.in_features]) for layer in blocks], repeats):6.2f}"
        )
        print(f"drafter, {n} row(s), ms: " + "   ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", default="1,2,3,4,5,8")
    args = parser.parse_args()
    print(machine_line(), flush=True)
    target(args.repeats, [int(n) for n in args.rows.split(",")])
    drafter(args.repeats)


if __name__ == "__main__":
    main()
