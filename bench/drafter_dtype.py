"""The default drafter in bf16 and in weight-only int8 (--draft-dtype int8), side by side.

One process, models loaded once; on each prompt of a set: plain decoding, then the cost
policy (gamma <= 12) with the bf16 drafter, then with the int8 copy of the same drafter.
Prints c of each drafter, and per prompt tok/s, speedup over plain, acceptance and whether
the output equals plain decoding's (greedy).

    python bench/drafter_dtype.py [--prompts quick] [--max-new-tokens 128] [--gamma-max 12]
"""

from __future__ import annotations

import argparse
import copy

from specbench import models
from specbench.bench import encode_prompt
from specbench.costs import measure_costs, timing_context
from specbench.decode import GenerationConfig, plain_generate, speculative_generate
from specbench.drafters import make_drafter
from specbench.gamma import make_policy
from specbench.kernels import use_kernels
from specbench.prompts import load_prompts
from specbench.quantize import quantize_linears
from specbench.results import geometric_mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="quick")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--gamma-max", type=int, default=12)
    args = parser.parse_args()
    models.quiet_transformers()
    pair = models.load_pair(models.PairConfig(draft_dtype="bfloat16"))  # measures the bf16 drafter, whatever the default
    target = pair.target.model
    drafters = {"bf16": pair.drafter_model.model, "int8": copy.deepcopy(pair.drafter_model.model)}
    quantize_linears(drafters["int8"])
    for model in (target, *drafters.values()):
        use_kernels(model, "auto")
    prompts = load_prompts(args.prompts)
    ids = [encode_prompt(pair.tokenizer, p) for p in prompts]
    context = timing_context(ids[0], args.max_new_tokens, pair.context_limit)
    costs = {name: measure_costs(target, model, context, 5) for name, model in drafters.items()}
    for name, c in costs.items():
        print(f"{name}: c = {c.c:.3f} (drafter step {c.drafter_step_seconds * 1000:.1f} ms, target step {c.target_step_seconds * 1000:.1f} ms)", flush=True)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, eos_token_ids=pair.eos_token_ids)
    for model in drafters.values():  # warm-up
        speculative_generate(target, make_drafter("model", model), ids[0], GenerationConfig(max_new_tokens=8), make_policy("fixed", 3))
    print("| category | plain tok/s | bf16 speedup (a) | int8 speedup (a) | same as plain |")
    print("|---|---|---|---|---|")
    speedups = {name: [] for name in drafters}
    for prompt, prompt_ids in zip(prompts, ids):
        plain = plain_generate(target, prompt_ids, config)
        base = plain.stats.tokens_per_second
        cells, same = [], []
        for name, model in drafters.items():
            policy = make_policy("cost", args.gamma_max, costs=costs[name])
            result = speculative_generate(target, make_drafter("model", model), prompt_ids, config, policy)
            speedup = result.stats.tokens_per_second / base
            speedups[name].append(speedup)
            cells.append(f"{speedup:.2f}x ({result.stats.acceptance_rate:.2f})")
            same.append(result.token_ids == plain.token_ids)
        print(f"| {prompt.category} | {base:.2f} | {' | '.join(cells)} | {'yes' if all(same) else 'NO'} |", flush=True)
    means = " | ".join(f"{geometric_mean(v):.2f}x" for v in speedups.values())
    print(f"| geometric mean | | {means} | |")


if __name__ == "__main__":
    main()
