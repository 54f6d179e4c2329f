"""The default target in several dtypes side by side (float32, `--dtype int8`, `--dtype
q4k`): plain greedy decoding speed, and how often each writes the first one's text.

Every target is loaded once (float32 on the `--kernels auto` path, as `generate` runs it)
and every prompt of the set is decoded by each in turn, so drift of the machine's speed
hits all alike. Per prompt: tokens/s of each (decode only, prefill apart), each one's ratio
to the first, whether the texts are identical, and how many tokens they share before the
first difference. Ends with, per dtype, the geometric-mean ratio, the share of identical
texts and the share of tokens before the first difference.

    python dev/target_dtype.py [--prompts quick] [--max-new-tokens 128] [--dtypes float32,int8,q4k] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import math

from common import machine_line

from specbench.bench.prompts import load_prompts
from specbench.core.generate import GenerationConfig, plain_generate
from specbench.models.loading import PairConfig, load_pair
from specbench.models.model import quiet_transformers
from specbench.models.text import encode_prompt


def load_target(dtype: str):
    pair = load_pair(PairConfig(dtype=dtype, drafter="none"))
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
    parser.add_argument(
        "--dtypes", default="float32,int8,q4k", help="target dtypes, comma-separated; the first is the reference"
    )
    parser.add_argument("--out", help="write the per-prompt rows as JSON here")
    args = parser.parse_args()
    quiet_transformers()
    print(machine_line())
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    reference, others = dtypes[0], dtypes[1:]
    pairs = {dtype: load_target(dtype) for dtype in dtypes}
    tokenizer = pairs[reference].tokenizer
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, eos_token_ids=pairs[reference].eos_token_ids)
    rows = []
    print(
        f"{'prompt':24s} "
        + " ".join(f"{d + ' tok/s':>12s}" for d in dtypes)
        + "".join(f" {d + ' ratio, same, shared':>26s}" for d in others)
    )
    for prompt in load_prompts(args.prompts):
        ids = encode_prompt(tokenizer, prompt.messages())
        runs = {dtype: plain_generate(pair.target.model, ids, config) for dtype, pair in pairs.items()}
        speed = {dtype: run.stats.new_tokens / run.stats.decode_seconds for dtype, run in runs.items()}
        base = runs[reference].token_ids
        row = {"prompt_id": prompt.id, "category": prompt.category, "reference_tokens": len(base)}
        line = f"{prompt.id:24s} " + " ".join(f"{speed[d]:12.2f}" for d in dtypes)
        for dtype in dtypes:
            row[f"{dtype}_tokens_per_second"] = speed[dtype]
        for dtype in others:
            ids_other = runs[dtype].token_ids
            row[f"{dtype}_identical"] = ids_other == base
            row[f"{dtype}_shared_prefix"] = shared_prefix(base, ids_other)
            prefix = row[f"{dtype}_shared_prefix"]
            line += f" {speed[dtype] / speed[reference]:12.2f} {str(ids_other == base):>5s} {prefix:4d}/{len(base)}"
        rows.append(row)
        print(line, flush=True)
    for dtype in others:
        ratio = math.exp(
            sum(math.log(r[f"{dtype}_tokens_per_second"] / r[f"{reference}_tokens_per_second"]) for r in rows)
            / len(rows)
        )
        identical = sum(r[f"{dtype}_identical"] for r in rows)
        shared = sum(r[f"{dtype}_shared_prefix"] for r in rows) / sum(r["reference_tokens"] for r in rows)
        print(
            f"{dtype} / {reference} tokens per second: {ratio:.2f}x (geometric mean); "
            f"identical texts {identical}/{len(rows)}; tokens before the first difference {shared:.0%}"
        )
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"machine": machine_line(), "dtypes": dtypes, "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
