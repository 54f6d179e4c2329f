"""The default target's forward over a cache: its own (HF's), the lean one in PyTorch, and the
lean one's native layers (fused_step.py: what `specbench` runs for a q4k or int8 target), in
one call over the cache's slabs and a layer at a time through the cache's own update.

On a cache of --context prompt tokens (the first quick prompt, repeated), interleaved, median
of --repeats: one forward over k new tokens for each k of --rows (a decoding step is k = 1, a
verify pass of gamma drafts k = gamma + 1), each way over its own copy of the cache. Prints
milliseconds; whether the lean forward's logits are the own forward's bits (they must be);
how far the native layers' are from them (another order of float32 sums: not the same bits,
but every decoding mode runs them, so greedy parity holds), with whether each row's argmax
agrees; and whether a layer at a time gives the one call's bits (it must).

    python dev/target_step.py [--context 144] [--repeats 15] [--rows 1,2,4,8]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import layer_at_a_time, load_default_pair, machine_line, prompt_ids, unfused

from specbench.bench.prompts import load_prompts
from specbench.core.cache import cache_arg, copy_cache, crop_cache, new_cache


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
        raise SystemExit(
            "the target does not run the lean forward here (not a float32 CPU target of a Qwen2/Llama layout)"
        )
    prompt = prompt_ids(pair, load_prompts("quick")[0])
    context = (prompt * (args.context // len(prompt) + 1))[: args.context]
    ways = {"own (HF's)": lean.own, "lean": lambda **kw: unfused(lean.decoder, lambda: lean(**kw))}
    if lean.decoder.fused is not None:
        ways["native layers"] = lean
        ways["a layer at a time"] = lambda **kw: layer_at_a_time(lambda: lean(**kw))
    print(machine_line())
    print(
        f"{pair.target.name}, {args.context} cached tokens, {torch.get_num_threads()} threads, median of {args.repeats}"
    )
    native = "native layers" in ways
    print(
        "| new tokens | own (HF's) ms | lean ms | lean / own | same bits |"
        + (
            " native ms | native / own | max abs logit diff | same argmax | a layer at a time ms | same bits |"
            if native
            else ""
        )
    )
    print("|---|---|---|---|---|" + ("---|---|---|---|---|---|" if native else ""))
    prefilled = new_cache(target)
    with torch.inference_mode():
        target(input_ids=torch.tensor([context]), **cache_arg(target, prefilled), use_cache=True, logits_to_keep=1)
        caches = {name: copy_cache(prefilled, len(context)) for name in ways}
        for k in (int(r) for r in args.rows.split(",")):
            ids = torch.tensor([(context * k)[:k]])
            times: dict[str, list[float]] = {name: [] for name in ways}
            logits: dict[str, torch.Tensor] = {}
            for _ in range(args.repeats + 1):  # the first round warms up and is not counted
                for name, forward in ways.items():
                    start = time.perf_counter()
                    logits[name] = forward(
                        input_ids=ids, **cache_arg(target, caches[name]), use_cache=True, logits_to_keep=k
                    ).logits
                    times[name].append(time.perf_counter() - start)
                    crop_cache(caches[name], len(context))
            own, mine, *fused = (statistics.median(times[name][1:]) * 1000 for name in ways)
            same = torch.equal(logits["own (HF's)"], logits["lean"])
            row = f"| {k} | {own:.1f} | {mine:.1f} | {mine / own:.2f} | {'yes' if same else 'NO'} |"
            if native:
                theirs, got = logits["own (HF's)"], logits["native layers"]
                agree = int((theirs.argmax(-1) == got.argmax(-1)).sum())
                row += f" {fused[0]:.1f} | {fused[0] / own:.2f} | {(theirs - got).abs().max():.2e} | {agree}/{k} |"
                row += f" {fused[1]:.1f} | {'yes' if torch.equal(got, logits['a layer at a time']) else 'NO'} |"
            print(row)


if __name__ == "__main__":
    main()
