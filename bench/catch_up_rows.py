"""Drafter forwards over 1..4 new tokens with up to 1, 2 or 3 half-precision rows on the
layer's own weight (kernels.HybridLinear.HALF_ROWS; more rows go through the packed fp32
copy), interleaved on the same cache. A model drafter feeds two tokens after every fully
accepted round (its last draft, never fed, and the bonus token), and more after a
model-free copy round or a skipped one; this is how those forwards pick their kernel.

    python bench/catch_up_rows.py [--context 200] [--repeats 8]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from specbench import models
from specbench.costs import ForwardTimer
from specbench.kernels import HybridLinear, use_kernels

TOKENS = (1, 2, 3, 4)
HALF_ROWS = (1, 2, 3)


@torch.inference_mode()
def forward_ms(model, context: list[int], repeats: int) -> dict[tuple[int, int], float]:
    """(half rows, new tokens) -> median milliseconds of one forward (last row's logits)."""
    timer = ForwardTimer(model, context)
    times: dict[tuple[int, int], list[float]] = {(h, n): [] for h in HALF_ROWS for n in TOKENS}
    default = HybridLinear.HALF_ROWS
    try:
        for round_ in range(repeats + 1):  # round 0 warms up
            for (half_rows, n), samples in times.items():
                HybridLinear.HALF_ROWS = half_rows
                elapsed = timer.seconds(n, rows=1)
                if round_:
                    samples.append(elapsed)
    finally:
        HybridLinear.HALF_ROWS = default
    return {key: statistics.median(samples) * 1000 for key, samples in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    models.quiet_transformers()
    pair = models.load_pair(models.PairConfig(draft_dtype="bfloat16"))  # measures the bf16 drafter, whatever the default
    drafter = pair.drafter_model.model
    use_kernels(drafter, "auto")
    ms = forward_ms(drafter, list(range(1000, 1000 + args.context)), args.repeats)
    print(f"drafter ({drafter.dtype}), {args.context} cached tokens, median of {args.repeats}; in brackets: / one token")
    print("| half rows | " + " | ".join(f"{n} token{'s' * (n > 1)}" for n in TOKENS) + " |")
    print("|---|" + "---|" * len(TOKENS))
    for h in HALF_ROWS:
        one = ms[(h, 1)]
        print(f"| {h} | " + " | ".join(f"{ms[(h, n)]:.1f} ms ({ms[(h, n)] / one:.2f})" for n in TOKENS) + " |", flush=True)


if __name__ == "__main__":
    main()
