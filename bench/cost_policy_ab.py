"""The cost policy and cost measurement of an earlier commit against the current ones, side
by side in one process: per prompt, plain decoding, then the cost policy (gamma <= 12) as
(old policy, old costs), (old policy, new costs), (new policy, new costs), then HF's
assisted generation with its defaults. The old modules are read from git, so this runs in a
checkout. The default --old is the commit before the policy stopped paying for refused rows.

    python bench/cost_policy_ab.py [--old f4aedf7] [--prompts quick] [--max-new-tokens 128]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

from specbench import models
from specbench.bench import encode_prompt, measure_hf_assisted
from specbench.costs import measure_costs, timing_context
from specbench.decode import GenerationConfig, plain_generate, speculative_generate
from specbench.drafters import make_drafter
from specbench.gamma import CostAwareGamma, make_policy
from specbench.kernels import use_kernels
from specbench.prompts import load_prompts
from specbench.results import geometric_mean


def old_module(rev: str, path: str, name: str):
    """specbench/<path> as it was at `rev`, imported under `name`."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], check=True, capture_output=True, text=True).stdout
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", default="f4aedf7")
    parser.add_argument("--prompts", default="quick")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--gamma-max", type=int, default=12)
    args = parser.parse_args()
    old_gamma = old_module(args.old, "specbench/gamma.py", "old_gamma")
    old_costs = old_module(args.old, "specbench/costs.py", "old_costs")
    models.quiet_transformers()
    pair = models.load_pair(models.PairConfig())
    target, drafter = pair.target.model, pair.drafter_model.model
    for model in (target, drafter):
        use_kernels(model, "auto")
    prompts = load_prompts(args.prompts)
    ids = [encode_prompt(pair.tokenizer, p) for p in prompts]
    context = timing_context(ids[0], args.max_new_tokens, pair.context_limit)
    old_c, new_c = old_costs.measure_costs(target, drafter, context, 5), measure_costs(target, drafter, context, 5)
    for name, costs in (("old", old_c), ("new", new_c)):
        print(f"{name} costs: c = {costs.c:.3f}, v(k) = " + " ".join(f"{v:.2f}" for v in costs.verify_cost.values()), flush=True)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, eos_token_ids=pair.eos_token_ids)
    warm = GenerationConfig(max_new_tokens=8, eos_token_ids=pair.eos_token_ids)
    speculative_generate(target, make_drafter("model", drafter), ids[0], warm, make_policy("fixed", 3))
    measure_hf_assisted(target, drafter, ids[0], warm, None)
    g = args.gamma_max
    policies = {
        "old policy, old costs": lambda: old_gamma.CostAwareGamma(g, old_c.c, old_c.verify_cost),
        "old policy, new costs": lambda: old_gamma.CostAwareGamma(g, new_c.c, new_c.verify_cost),
        "new policy, new costs": lambda: CostAwareGamma(g, new_c.c, new_c.verify_cost),
    }
    speedups: dict[str, list[float]] = {name: [] for name in [*policies, "HF defaults"]}
    print("| category | plain tok/s | " + " | ".join(speedups) + " | all equal plain |")
    print("|---" * (len(speedups) + 3) + "|")
    for prompt, prompt_ids in zip(prompts, ids):
        plain = plain_generate(target, prompt_ids, config)
        base = plain.stats.tokens_per_second
        cells, same = [], []
        for name, make in policies.items():
            result = speculative_generate(target, make_drafter("model", drafter), prompt_ids, config, make())
            s = result.stats
            speedups[name].append(s.tokens_per_second / base)
            cells.append(f"{s.tokens_per_second / base:.2f}x (a {s.acceptance_rate:.2f}, {s.target_forwards} fwd, {s.drafted} drafted)")
            same.append(result.token_ids == plain.token_ids)
        hf = measure_hf_assisted(target, drafter, prompt_ids, config, None)
        speedups["HF defaults"].append(hf.stats.tokens_per_second / base)
        cells.append(f"{hf.stats.tokens_per_second / base:.2f}x")
        same.append(hf.token_ids == plain.token_ids)
        print(f"| {prompt.category} | {base:.2f} | " + " | ".join(cells) + f" | {'yes' if all(same) else 'NO'} |", flush=True)
    print("| geometric mean | | " + " | ".join(f"{geometric_mean(v):.2f}x" for v in speedups.values()) + " | |")
    for name in policies:  # a very short HF run can decode nothing after its first round (0 tok/s)
        ratios = [a / b for a, b in zip(speedups[name], speedups["HF defaults"]) if b > 0]
        print(f"{name}: {geometric_mean(ratios):.2f}x HF's defaults")


if __name__ == "__main__":
    main()
