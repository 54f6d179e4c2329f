"""Every drafter x gamma policy on a code and a prose prompt, beside plain decoding.

One process, models loaded once, plain decoding first on each prompt, then each
configuration: the ratios are side by side in one run. Greedy; every output is checked
against plain decoding.

    python bench/compare_policies.py [--max-new-tokens 64] [--gamma-max 6] [--kernels auto]
"""

from __future__ import annotations

import argparse

from specbench import models
from specbench.costs import for_drafter, measure_costs, timing_context
from specbench.decode import GenerationConfig, plain_generate, speculative_generate
from specbench.drafters import make_drafter
from specbench.gamma import make_policy
from specbench.kernels import use_kernels

PROMPTS = {
    "code": "Write a Python function that checks whether a string is a palindrome, ignoring case and punctuation.",
    "prose": "Write a short paragraph about why people enjoy walking in the rain.",
}


def configurations(gamma_max: int, costs) -> list[tuple[str, str, object]]:
    """(drafter, label, policy factory) for every drafter and policy worth comparing."""
    policies = [
        ("fixed γ=4", lambda: make_policy("fixed", 4)),
        (f"fixed γ={gamma_max}", lambda: make_policy("fixed", gamma_max)),
        ("heuristic", lambda: make_policy("heuristic", 4)),
        (f"egag 1..{gamma_max}", lambda: make_policy("egag", gamma_max, gamma_min=1)),
        (f"entropy-stop ≤{gamma_max}", lambda: make_policy("entropy-stop", gamma_max)),
        (f"confidence-stop ≤{gamma_max}", lambda: make_policy("confidence-stop", gamma_max)),
        (f"cost ≤{gamma_max}", lambda: make_policy("cost", gamma_max, costs=costs)),
    ]
    free = for_drafter(costs, "ngram")
    model_free = [
        ("fixed γ=4", lambda: make_policy("fixed", 4)),
        (f"cost ≤{gamma_max}", lambda: make_policy("cost", gamma_max, costs=free)),
    ]
    return [("model", label, make) for label, make in policies] + [
        (drafter, label, make) for drafter in ("ngram", "prompt-lookup") for label, make in model_free
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--gamma-max", type=int, default=6)
    parser.add_argument("--kernels", default="auto")
    args = parser.parse_args()
    models.quiet_transformers()
    pair = models.load_pair(models.PairConfig())
    target, drafter_model = pair.target.model, pair.drafter_model.model
    use_kernels(target, args.kernels)
    ids = {name: models.encode_prompt(pair.tokenizer, text) for name, text in PROMPTS.items()}
    costs = measure_costs(target, drafter_model, timing_context(ids["code"], args.max_new_tokens, pair.context_limit), 3)
    print(f"c = {costs.c:.3f}, v(k) = " + " ".join(f"{v:.2f}" for v in costs.verify_cost.values()), flush=True)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, eos_token_ids=pair.eos_token_ids)
    warm_up = GenerationConfig(max_new_tokens=8)
    speculative_generate(target, make_drafter("model", drafter_model), ids["code"], warm_up, make_policy("fixed", 3))
    print("| prompt | drafter | policy | tok/s | speedup | acceptance | mean accepted length | same as plain |")
    print("|---|---|---|---|---|---|---|---|")
    for name, prompt_ids in ids.items():
        plain = plain_generate(target, prompt_ids, config)
        base = plain.stats.tokens_per_second
        print(f"| {name} | none | plain | {base:.2f} | 1.00x | - | 1.00 | - |", flush=True)
        for drafter, label, make in configurations(args.gamma_max, costs):
            result = speculative_generate(target, make_drafter(drafter, drafter_model), prompt_ids, config, make())
            s = result.stats
            same = "yes" if result.token_ids == plain.token_ids else "NO"
            print(f"| {name} | {drafter} | {label} | {s.tokens_per_second:.2f} | {s.tokens_per_second / base:.2f}x | "
                  f"{s.acceptance_rate:.2f} | {s.mean_accepted_length:.2f} | {same} |", flush=True)


if __name__ == "__main__":
    main()
