"""The default drafter over its whole vocabulary and over the first N ids (--draft-vocab),
side by side.

One process, models loaded once; on each prompt of a set: plain decoding, then the cost
policy (gamma <= 12) with the drafter scoring every id, then scoring ids below each limit
(plus the prompt's ids and EOS). Prints c for each limit, and per prompt tok/s, speedup
over plain, acceptance and whether the output equals plain decoding's (greedy).

    python bench/draft_vocab.py [--limits 32768,65536] [--prompts quick] [--max-new-tokens 128]
"""

from __future__ import annotations

import argparse

from specbench import models
from specbench.bench import encode_prompt
from specbench.costs import measure_costs, timing_context
from specbench.decode import GenerationConfig, plain_generate, speculative_generate
from specbench.drafters import make_drafter
from specbench.gamma import make_policy
from specbench.kernels import use_kernels
from specbench.prompts import load_prompts
from specbench.results import geometric_mean
from specbench.sampling import SamplingConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limits", default="32768,65536", help="comma-separated vocabulary limits; 0 (all ids) always runs first")
    parser.add_argument("--prompts", default="quick")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--gamma-max", type=int, default=12)
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    limits = [0, *(int(x) for x in args.limits.split(",") if x.strip())]
    models.quiet_transformers()
    pair = models.load_pair(models.PairConfig())
    target, drafter = pair.target.model, pair.drafter_model.model
    for model in (target, drafter):
        use_kernels(model, "auto")
    prompts = load_prompts(args.prompts)
    ids = [encode_prompt(pair.tokenizer, p) for p in prompts]
    context = timing_context(ids[0], args.max_new_tokens, pair.context_limit)
    costs = {n: measure_costs(target, drafter, context, 5, draft_vocab=n) for n in limits}
    for n, c in costs.items():
        print(f"limit {n or 'all'}: c = {c.c:.3f} (drafter step {c.drafter_step_seconds * 1000:.1f} ms, target step {c.target_step_seconds * 1000:.1f} ms)", flush=True)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, eos_token_ids=pair.eos_token_ids, sampling=SamplingConfig(temperature=args.temperature))
    eos = pair.eos_token_ids

    def run(n, prompt_ids, gen):
        return speculative_generate(target, make_drafter("model", drafter, n, eos), prompt_ids, gen, make_policy("cost", args.gamma_max, costs=costs[n]))

    for n in limits:  # warm-up
        run(n, ids[0], GenerationConfig(max_new_tokens=8))
    names = [f"{n or 'all'} ids" for n in limits]
    print(f"| category | plain tok/s | {' | '.join(names)} | same as plain |")
    print("|---|---|" + "---|" * len(limits) + "---|")
    speedups = {n: [] for n in limits}
    for prompt, prompt_ids in zip(prompts, ids):
        plain = plain_generate(target, prompt_ids, config)
        base = plain.stats.tokens_per_second
        cells, same = [], []
        for n in limits:
            result = run(n, prompt_ids, config)
            speedup = result.stats.tokens_per_second / base
            speedups[n].append(speedup)
            cells.append(f"{speedup:.2f}x (a {result.stats.acceptance_rate:.2f})")
            same.append(result.token_ids == plain.token_ids)
        verdict = "yes" if all(same) else "NO" if config.sampling.greedy else "n/a (sampled)"
        print(f"| {prompt.category} | {base:.2f} | {' | '.join(cells)} | {verdict} |", flush=True)
    means = " | ".join(f"**{geometric_mean(v):.2f}x**" for v in speedups.values())
    print(f"| geometric mean | | {means} | |")


if __name__ == "__main__":
    main()
