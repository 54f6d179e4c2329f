"""The default target in float32 and in int8 (`--dtype int8`), side by side: plain greedy
decoding speed, and how often the int8 target writes the float32 target's text.

Both targets are loaded once (float32 on the `--kernels auto` path, as `generate` runs it)
and every prompt of the set is decoded by each in turn, so drift of the machine's speed
hits both alike. Per prompt: tokens/s of each (decode only, prefill apart), their ratio,
whether the texts are identical, and how many tokens they share before the first
difference. Ends with the geometric-mean ratio, the share of identical texts and the
share of tokens before the first difference.

    python bench/target_dtype.py [--prompts quick] [--max-new-tokens 128] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import math

from common import machine_line
from specbench import models
from specbench.bench.prompts import load_prompts
from specbench.core.generate import GenerationConfig, plain_generate


def load_target(dtype: str):
    pair = models.load_pair(models.PairConfig(dtype=dtype, drafter="none"))
    pair.use_kernels("auto")
    return pair


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens a and b share before they first differ."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="quick")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out", help="write the per-prompt rows as JSON here")
    args = parser.parse_args()
    models.quiet_transformers()
    print(machine_line())
    pairs = {dtype: load_target(dtype) for dtype in ("float32", "int8")}
    tokenizer = pairs["float32"].tokenizer
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, eos_token_ids=pairs["float32"].eos_token_ids)
    rows = []
    print(f"{'prompt':24s} {'fp32 tok/s':>10s} {'int8 tok/s':>10s} {'ratio':>6s} {'same':>5s} {'shared':>7s}")
    for prompt in load_prompts(args.prompts):
        ids = models.encode_prompt(tokenizer, prompt.messages())
        runs = {dtype: plain_generate(pair.target.model, ids, config) for dtype, pair in pairs.items()}
        speed = {dtype: run.stats.new_tokens / run.stats.decode_seconds for dtype, run in runs.items()}
        fp32, int8 = runs["float32"].token_ids, runs["int8"].token_ids
        row = {
            "prompt_id": prompt.id,
            "category": prompt.category,
            "fp32_tokens_per_second": speed["float32"],
            "int8_tokens_per_second": speed["int8"],
            "identical": fp32 == int8,
            "shared_prefix": shared_prefix(fp32, int8),
            "fp32_tokens": len(fp32),
        }
        rows.append(row)
        ratio = speed["int8"] / speed["float32"]
        print(f"{prompt.id:24s} {speed['float32']:10.2f} {speed['int8']:10.2f} {ratio:6.2f} {str(row['identical']):>5s} {row['shared_prefix']:4d}/{len(fp32)}", flush=True)
    ratio = math.exp(sum(math.log(r["int8_tokens_per_second"] / r["fp32_tokens_per_second"]) for r in rows) / len(rows))
    identical = sum(r["identical"] for r in rows)
    shared = sum(r["shared_prefix"] for r in rows) / sum(r["fp32_tokens"] for r in rows)
    print(f"int8 / fp32 tokens per second: {ratio:.2f}x (geometric mean); identical texts {identical}/{len(rows)}; tokens before the first difference {shared:.0%}")
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"machine": machine_line(), "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
