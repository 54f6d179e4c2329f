"""One-token forwards of the default pair: MKL's GEMV on the dense weight vs oneDNN's packed
weight, interleaved on the same cache. This is why kernels.HybridLinear runs one fp32 row
through oneDNN and one bf16 row through the layer's own weight.

    python bench/one_row_kernels.py [--context 200] [--repeats 8]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from specbench import models
from specbench.costs import ForwardTimer
from specbench.kernels import HybridLinear, use_kernels

DENSE = HybridLinear.forward  # one half-precision row: the dense weight (fp32 rows: oneDNN)


def dense_one_row(self, x):
    """What HybridLinear did before: any single row through F.linear on the dense weight."""
    if x.numel() == self.in_features:
        return torch.nn.functional.linear(x, self.weight, self.bias)
    return DENSE(self, x)


def packed_always(self, x):
    return torch.ops.mkldnn._linear_pointwise(x.float(), self.packed, self.packed_bias, "none", [], "").to(x.dtype)


@torch.inference_mode()
def one_row_ms(model, context: list[int], repeats: int) -> dict[str, float]:
    timer = ForwardTimer(model, context)
    times: dict[str, list[float]] = {"dense GEMV": [], "oneDNN packed": []}
    for round_ in range(repeats + 1):  # round 0 warms up
        for name, forward in (("dense GEMV", dense_one_row), ("oneDNN packed", packed_always)):
            HybridLinear.forward = forward
            elapsed = timer.seconds(1)
            if round_:
                times[name].append(elapsed)
    HybridLinear.forward = DENSE
    return {name: statistics.median(t) * 1000 for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    models.quiet_transformers()
    pair = models.load_pair(models.PairConfig(draft_dtype="bfloat16"))  # measures the bf16 drafter, whatever the default
    context = list(range(1000, 1000 + args.context))
    for role, loaded in (("target", pair.target), ("drafter", pair.drafter_model)):
        use_kernels(loaded.model, "auto")
        ms = one_row_ms(loaded.model, context, args.repeats)
        print(f"{role} ({loaded.model.dtype}): " + ", ".join(f"{name} {value:.1f} ms" for name, value in ms.items()), flush=True)


if __name__ == "__main__":
    main()
