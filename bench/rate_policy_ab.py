"""The cost policy before and after it priced tokens at the generation's rate and calibrated
step 0 apart from later steps, side by side in one process.

Per prompt: c and v(k) measured on the prompt's context (as `specbench sweep` does), plain
decoding, then the cost policy (gamma <= 12) "before" (CostAwareGamma(at_rate=False,
split_first=False)) and "after" (the default), in alternating order from prompt to prompt.
The drafter is generate's default: the default pair's model drafter over 65536 ids with
lookup copies (--drafter model drops the copies). Greedy: both must equal plain decoding.

    python bench/rate_policy_ab.py [--prompts quick] [--max-new-tokens 128] [--drafter model+lookup]
"""

from __future__ import annotations

import argparse

from specbench import defaults, models
from specbench.bench import encode_prompt
from specbench.costs import measure_costs, timing_context
from specbench.decode import GenerationConfig, plain_generate, speculative_generate
from specbench.drafters import make_drafter
from specbench.gamma import CostAwareGamma, make_policy
from specbench.kernels import use_kernels
from specbench.prompts import load_prompts
from specbench.results import geometric_mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="quick")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--gamma-max", type=int, default=12)
    parser.add_argument("--drafter", default="model+lookup", choices=("model", "model+lookup"))
    args = parser.parse_args()
    models.quiet_transformers()
    pair = models.load_pair(models.PairConfig())
    target, drafter = pair.target.model, pair.drafter_model.model
    for model in (target, drafter):
        use_kernels(model, "auto")
    vocab = defaults.DEFAULT_DRAFT_VOCAB
    prompts = load_prompts(args.prompts)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, eos_token_ids=pair.eos_token_ids)
    warm = GenerationConfig(max_new_tokens=8, eos_token_ids=pair.eos_token_ids)
    first = encode_prompt(pair.tokenizer, prompts[0])
    speculative_generate(target, make_drafter(args.drafter, drafter, vocab, pair.eos_token_ids), first, warm, make_policy("fixed", 3))
    g = args.gamma_max
    variants = {
        "before": lambda costs: CostAwareGamma(g, costs.c, costs.verify_cost, at_rate=False, split_first=False),
        "after": lambda costs: CostAwareGamma(g, costs.c, costs.verify_cost),
    }
    speedups: dict[str, list[float]] = {name: [] for name in variants}
    print("| category | c | plain tok/s | " + " | ".join(f"{name} (a, target forwards, drafted)" for name in variants) + " | equal plain |")
    print("|---" * (len(variants) + 4) + "|")
    for i, prompt in enumerate(prompts):
        ids = encode_prompt(pair.tokenizer, prompt)
        costs = measure_costs(target, drafter, timing_context(ids, args.max_new_tokens, pair.context_limit), 5, draft_vocab=vocab)
        plain = plain_generate(target, ids, config)
        base = plain.stats.tokens_per_second
        cells, same = {}, []
        for name in list(variants)[:: 1 if i % 2 == 0 else -1]:
            made = make_drafter(args.drafter, drafter, vocab, pair.eos_token_ids)
            result = speculative_generate(target, made, ids, config, variants[name](costs))
            s = result.stats
            speedups[name].append(s.tokens_per_second / base)
            cells[name] = f"{s.tokens_per_second / base:.2f}x (a {s.acceptance_rate:.2f}, {s.target_forwards}, {s.drafted})"
            same.append(result.token_ids == plain.token_ids)
        row = " | ".join(cells[name] for name in variants)
        print(f"| {prompt.category} | {costs.c:.3f} | {base:.2f} | {row} | {'yes' if all(same) else 'NO'} |", flush=True)
    print("| geometric mean | | | " + " | ".join(f"{geometric_mean(v):.2f}x" for v in speedups.values()) + " | |")
    ratios = [a / b for a, b in zip(speedups["after"], speedups["before"])]
    print(f"after / before: {geometric_mean(ratios):.3f} (per prompt {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
