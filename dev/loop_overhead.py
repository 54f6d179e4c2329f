"""How much of a speculative round is the loop itself, and what the kernels change.

Forward hooks time every call of the target and of the drafter (the models' forward
passes, nothing else). Whatever else a round spends (sampling processors, verification,
cache crops, tensor bookkeeping, Python) is the loop's overhead:

    overhead share = (decode wall time - target forward time - drafter forward time) / decode wall time

It also measures the target's verify cost curve v(k) = t(k tokens) / t(1 token) over a
realistic cache, for the default MKL kernels and for `--kernels onednn`.

    python dev/loop_overhead.py [--max-new-tokens 64] [--gamma 4] [--kernels default onednn]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import load_default_pair, machine_line, prompt_ids

from specbench.bench.costs import ForwardTimer
from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
from specbench.policies import FixedGamma
from specbench.speed.kernels import use_kernels

PROMPT = "Write a Python function that merges two sorted lists into one sorted list, with a docstring."


class HookTimer:
    """Accumulates wall time spent inside a module's forward calls."""

    def __init__(self, module: torch.nn.Module):
        self.calls: list[float] = []  # seconds of each forward call
        self._start = 0.0
        module.register_forward_pre_hook(self._pre)
        module.register_forward_hook(self._post)

    def _pre(self, module, args):
        self._start = time.perf_counter()

    def _post(self, module, args, output):
        self.calls.append(time.perf_counter() - self._start)

    def reset(self) -> None:
        self.calls = []


@torch.inference_mode()
def verify_cost_curve(model, context_len: int = 200, ks=(1, 2, 3, 5, 9), repeats: int = 5) -> dict[int, float]:
    """Median seconds of a target forward over k new tokens after a context_len-token cache
    (speed.costs.ForwardTimer, the timer `specbench sweep` measures v(k) with)."""
    timer = ForwardTimer(model, torch.randint(100, 5000, (context_len,)).tolist())
    return {k: statistics.median(timer.seconds(k) for _ in range(repeats)) for k in ks}


def measure(pair, ids: list[int], args) -> dict:
    target, drafter_model = pair.target.model, pair.drafter_model.model
    config = GenerationConfig(max_new_tokens=args.max_new_tokens)
    target_timer, drafter_timer = HookTimer(target), HookTimer(drafter_model)
    warm_up = GenerationConfig(max_new_tokens=8)
    speculative_generate(target, pair.new_drafter(), ids, warm_up, FixedGamma(args.gamma))
    target_timer.reset()
    plain = plain_generate(target, ids, config)
    plain_forwards = sum(target_timer.calls[1:])  # the first call is the prefill
    target_timer.reset(), drafter_timer.reset()
    spec = speculative_generate(target, pair.new_drafter(), ids, config, FixedGamma(args.gamma))
    spec_forwards = sum(target_timer.calls[1:]) + sum(drafter_timer.calls)
    decode = spec.stats.decode_seconds
    return {
        "identical_to_plain": spec.token_ids == plain.token_ids,
        "plain_tokens_per_second": plain.stats.tokens_per_second,
        "spec_tokens_per_second": spec.stats.tokens_per_second,
        "acceptance_rate": spec.stats.acceptance_rate,
        "mean_accepted_length": spec.stats.mean_accepted_length,
        "rounds": spec.stats.rounds,
        "spec_decode_seconds": decode,
        "spec_overhead_seconds": decode - spec_forwards,
        "spec_overhead_share": (decode - spec_forwards) / decode,
        "plain_overhead_share": (plain.stats.decode_seconds - plain_forwards) / plain.stats.decode_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--kernels", nargs="+", default=["default", "onednn"])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pair = load_default_pair(kernels="default")  # the loop below swaps the target's kernels
    ids = prompt_ids(pair, PROMPT)
    print(machine_line())
    print(f"prompt {len(ids)} tokens")
    for kernels in args.kernels:
        use_kernels(pair.target.model, kernels)  # default: no-op; onednn: swap in place
        curve = verify_cost_curve(pair.target.model)
        v = {k: t / curve[1] for k, t in curve.items()}
        print(
            f"\n[{kernels}] target forward over a 200-token cache: "
            + ", ".join(f"k={k} {t * 1000:.0f} ms (v={v[k]:.2f})" for k, t in curve.items())
        )
        result = measure(pair, ids, args)
        for key, value in result.items():
            print(f"  {key:>22}: {value:.4f}" if isinstance(value, float) else f"  {key:>22}: {value}")


if __name__ == "__main__":
    main()
