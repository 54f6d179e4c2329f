"""The default target's forward over a cache, its own (HF's) against the lean one, side by side.

On a cache of --context prompt tokens (the first quick prompt, repeated), interleaved, median
of --repeats: one forward over k new tokens for each k of --rows (a decoding step is k = 1, a
verify pass of gamma drafts k = gamma + 1), through the model's own forward and through
speed/lean_step.py's (what `specbench` runs). Prints milliseconds and whether the logits are
the same bits (they must be: greedy parity does not depend on which forward ran).

    python bench/target_step.py [--context 144] [--repeats 15] [--rows 1,2,4,8]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from common import load_default_pair, machine_line, prompt_ids
from specbench.bench.prompts import load_prompts
from specbench.core.cache import cache_arg, crop_cache, new_cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=144)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rows", default="1,2,4,8")
    args = parser.parse_args()
    pair = load_default_pair()
    target = pair.target.model
    lean = target.forward
    if not hasattr(lean, "own"):
        raise SystemExit("the target does not run the lean forward here (not a float32 CPU target of a Qwen2/Llama layout)")
    prompt = prompt_ids(pair, load_prompts("quick")[0])
    context = (prompt * (args.context // len(prompt) + 1))[: args.context]
    ways = {"own (HF's)": lean.own, "lean": lean}
    print(machine_line())
    print(f"{pair.target.name}, {args.context} cached tokens, {torch.get_num_threads()} threads, median of {args.repeats}")
    print("| new tokens | own (HF's) ms | lean ms | lean / own | same bits |")
    print("|---|---|---|---|---|")
    cache = new_cache(target)
    with torch.inference_mode():
        target(input_ids=torch.tensor([context]), **cache_arg(target, cache), use_cache=True, logits_to_keep=1)
        for k in (int(r) for r in args.rows.split(",")):
            ids = torch.tensor([(context * k)[:k]])
            times: dict[str, list[float]] = {name: [] for name in ways}
            logits: dict[str, torch.Tensor] = {}
            for _ in range(args.repeats + 1):  # the first round warms up and is not counted
                for name, forward in ways.items():
                    start = time.perf_counter()
                    logits[name] = forward(input_ids=ids, **cache_arg(target, cache), use_cache=True, logits_to_keep=k).logits
                    times[name].append(time.perf_counter() - start)
                    crop_cache(cache, len(context))
            own, mine = (statistics.median(times[name][1:]) * 1000 for name in ways)
            same = torch.equal(*logits.values())
            print(f"| {k} | {own:.1f} | {mine:.1f} | {mine / own:.2f} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
