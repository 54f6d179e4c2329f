"""The cost policy with and without reading the drawn token, side by side at T > 0.

Once a sampled draft is kept, the cost policy re-reads the chance that the round's drafts
so far all survive from a table binned by the drawn token's q (gamma.CostAwareGamma), and
so stops drafting after a token drawn from the tail of q. "blind" is the same policy fed
no token: the row's top q stands in for the token, as before the change. Under greedy the
two are the same policy, so this runs at --temperature (default 0.7) only. "blind" is
CostAwareGamma(read_token=False).

One process, models loaded once; per prompt and seed, interleaved: plain decoding, then
the two policies in alternating order (model+lookup drafter, gamma <= 12, costs measured
per prompt as `specbench sweep` does). Prints per run tok/s, speedup over plain, drafter
steps, acceptance, the walltime model's prediction, and geometric means.

    python bench/drawn_token_ab.py [--prompts quick] [--seeds 0] [--max-new-tokens 128]
"""

from __future__ import annotations

import argparse
from pathlib import Path
import tempfile

from specbench import models
from specbench.bench import encode_prompt
from specbench.costs import costs_for, timing_context
from specbench.decode import GenerationConfig, context_limit, plain_generate, speculative_generate
from specbench.drafters import make_drafter
from specbench.gamma import CostAwareGamma
from specbench.kernels import use_kernels
from specbench.prompts import load_prompts
from specbench.results import geometric_mean, verify_cost_at
from specbench.sampling import SamplingConfig
from specbench.stats import walltime_speedup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="quick")
    parser.add_argument("--ids", default="", help="comma-separated prompt ids (default: the whole set)")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--gamma-max", type=int, default=12)
    parser.add_argument("--draft-vocab", type=int, default=65536)
    args = parser.parse_args()
    models.quiet_transformers()
    pair = models.load_pair(models.PairConfig())
    target, drafter_model = pair.target.model, pair.drafter_model.model
    for model in (target, drafter_model):
        use_kernels(model, "auto")
    prompts = load_prompts(args.prompts)
    if args.ids:
        prompts = [p for p in prompts if p.id in args.ids.split(",")]
    policies = {"drawn": {}, "blind": {"read_token": False}}  # blind: the policy as it was
    speedups: dict[str, list[float]] = {name: [] for name in policies}
    print("| prompt | seed | plain tok/s | " + " | ".join(f"{n}: speedup (model), drafter steps, accepted/drafted" for n in policies) + " |")
    print("|---|---|---|" + "---|" * len(policies))
    with tempfile.TemporaryDirectory() as folder:
        for prompt in prompts:
            prompt_ids = encode_prompt(pair.tokenizer, prompt)
            context = timing_context(prompt_ids, args.max_new_tokens, context_limit(target))
            costs, _ = costs_for(target, drafter_model, prompt.id, context, Path(folder), draft_vocab=args.draft_vocab)
            for seed in [int(s) for s in args.seeds.split(",")]:
                config = GenerationConfig(max_new_tokens=args.max_new_tokens, eos_token_ids=pair.eos_token_ids, sampling=SamplingConfig(args.temperature), seed=seed)
                plain = plain_generate(target, prompt_ids, config).stats.tokens_per_second
                order = list(policies) if seed % 2 == 0 else list(reversed(policies))
                cells = {}
                for name in order:
                    drafter = make_drafter("model+lookup", drafter_model, args.draft_vocab, pair.eos_token_ids)
                    policy = CostAwareGamma(args.gamma_max, costs.c, costs.verify_cost, **policies[name])
                    result = speculative_generate(target, drafter, prompt_ids, config, policy)
                    stats = result.stats
                    rounds = [(len(s.draft_tokens), len(s.tokens), sum(q is not None for q in s.draft_probs)) for s in result.steps[1:]]
                    model = walltime_speedup(rounds, costs.c, lambda k: verify_cost_at(costs.verify_cost, k))
                    speedup = stats.tokens_per_second / plain
                    speedups[name].append(speedup)
                    steps = sum(r[2] for r in rounds)
                    cells[name] = f"{speedup:.2f}x ({model:.2f}), {steps}, {stats.accepted}/{stats.drafted}"
                print(f"| {prompt.id} | {seed} | {plain:.2f} | " + " | ".join(cells[n] for n in policies) + " |", flush=True)
    print("\ngeometric mean speedup over plain: " + ", ".join(f"{n} {geometric_mean(v):.3f}x" for n, v in speedups.items()))


if __name__ == "__main__":
    main()
