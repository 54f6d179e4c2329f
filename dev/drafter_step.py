"""One draft step of the default drafter, four ways in int8 and in other dtypes, side by side.

On a cache of --context prompt tokens (the first quick prompt, repeated), interleaved,
median of --repeats: a forward over 1 and 2 new tokens (a draft step; a round's catch-up)
with the restricted head (--draft-vocab, default 65536), through
  - HF's decoder and the head's bf16 rows,
  - HF's decoder and the head's int8 rows (draft_vocab.RestrictedHead given its Int8Linear),
  - lean_step.py's forward and the int8 rows through PyTorch's int8 kernel,
  - the same through specbench's own kernels (native.py: int8_gemv.c on AVX512-VNNI, else
    int8_linear.c on AVX2): the step the model drafter runs (draft_vocab.RestrictedStep);
  - that step for the drafter in each of --also's dtypes (default q4k: its decoder layers as
    Q4_K blocks through q4k_linear.c), through the lean forward's PyTorch operations and,
    where they apply, as fused_step.py's native layers: in one call over the cache's slabs
    (what a q4k drafter runs) and a layer at a time through the cache's own update.
Each way runs over its own copy of the cache. Prints milliseconds and whether the argmax
agrees with the first way's.

    python dev/drafter_step.py [--context 144] [--repeats 21] [--also q4k]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import layer_at_a_time, load_default_pair, machine_line, prompt_ids, unfused

from specbench.bench.prompts import load_prompts
from specbench.core.cache import cache_arg, copy_cache, crop_cache, new_cache
from specbench.models.model import load_model
from specbench.models.specs import parse_model_spec
from specbench.speed import native
from specbench.speed.draft_vocab import RestrictedHead, output_head, restricted_head, restricted_logits
from specbench.speed.lean_step import lean_decoder
from specbench.speed.quantize import dense_twin


def pytorch_kernel(forward):
    """forward() with specbench's int8 kernels turned off (quantize falls back to PyTorch's)."""
    kernel, linear = native.kernel, native.linear_kernel
    native.kernel = native.linear_kernel = lambda: None
    try:
        return forward()
    finally:
        native.kernel, native.linear_kernel = kernel, linear


def load_drafter(dtype: str):
    """The default drafter again, in another dtype."""
    return load_model(parse_model_spec("default"), role="drafter", dtype=dtype).model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=144)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--draft-vocab", type=int, default=65536)
    parser.add_argument(
        "--also", default="q4k", help="other drafter dtypes, comma-separated, timed the last way ('' for none)"
    )
    args = parser.parse_args()
    pair = load_default_pair(draft_dtype="int8")
    others = {dtype: load_drafter(dtype) for dtype in filter(None, args.also.split(","))}
    drafter = pair.drafter_model.model
    prompt = prompt_ids(pair, load_prompts("quick")[0])
    context = (prompt * (args.context // len(prompt) + 1))[: args.context]
    int8_head = restricted_head(drafter, args.draft_vocab, context)
    head = output_head(drafter)
    bf16_head = RestrictedHead(dense_twin(head.qweight, head.scales, head.bias), int8_head.ids)
    ways = {
        "HF decoder, bf16 head rows": lambda ids, cache: restricted_logits(drafter, bf16_head, ids, cache, lean=False),
        "HF decoder, int8 head rows": lambda ids, cache: restricted_logits(drafter, int8_head, ids, cache, lean=False),
        "lean forward, int8 rows, PyTorch's kernel": lambda ids, cache: pytorch_kernel(
            lambda: restricted_logits(drafter, int8_head, ids, cache)
        ),
        "lean forward, int8 rows, specbench's kernel": lambda ids, cache: restricted_logits(
            drafter, int8_head, ids, cache
        ),
    }
    for dtype, other in others.items():  # the same cache's layout serves, with other weights
        other_head = restricted_head(other, args.draft_vocab, context)
        fused = lean_decoder(other).fused
        ways[f"lean forward, {dtype} rows, specbench's kernel"] = lambda ids, cache, m=other, h=other_head: unfused(
            lean_decoder(m), lambda: restricted_logits(m, h, ids, cache)
        )
        if fused is not None:
            ways[f"{dtype} layers as native calls (fused_step.py): the draft step"] = (
                lambda ids, cache, m=other, h=other_head: restricted_logits(m, h, ids, cache)
            )
            ways[f"{dtype} native layers, a layer at a time"] = lambda ids, cache, m=other, h=other_head: (
                layer_at_a_time(lambda: restricted_logits(m, h, ids, cache))
            )
    print(machine_line())
    prefilled = new_cache(drafter)
    with torch.inference_mode():
        drafter(input_ids=torch.tensor([context]), **cache_arg(drafter, prefilled), use_cache=True, logits_to_keep=1)
        caches = {name: copy_cache(prefilled, len(context)) for name in ways}
        print(
            f"{pair.drafter_model.name}, int8, {args.context} cached tokens, {torch.get_num_threads()} threads, "
            f"median of {args.repeats}"
        )
        print("| forward | 1 token | 2 tokens | argmax as the first way |")
        print("|---|---|---|---|")
        times = {(name, n): [] for name in ways for n in (1, 2)}
        agree = {name: 0 for name in ways}
        for r in range(args.repeats + 3):
            for n in (1, 2):
                new = torch.tensor([context[r : r + n]])
                first = None
                for name, way in ways.items():
                    start = time.perf_counter()
                    logits = way(new, caches[name])
                    elapsed = time.perf_counter() - start
                    crop_cache(caches[name], len(context))
                    if r >= 3:  # the first rounds warm up
                        times[name, n].append(elapsed)
                        first = logits.argmax(-1) if first is None else first
                        agree[name] += int(torch.equal(logits.argmax(-1), first))
        for name in ways:
            ms = [statistics.median(times[name, n]) * 1000 for n in (1, 2)]
            print(f"| {name} | {ms[0]:.1f} ms | {ms[1]:.1f} ms | {agree[name]}/{2 * args.repeats} |")


if __name__ == "__main__":
    main()
