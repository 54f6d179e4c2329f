"""Pearson chi-square of sampled sequences against their exact distribution, and the exact
distribution of a model's next tokens (shared by the losslessness tests)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
from scipy.stats import chisquare

from specbench.core.generate import GenerationConfig, speculative_generate
from specbench.core.sampling import SamplingConfig, logits_to_probs
from specbench.drafters import ModelDrafter
from specbench.policies import FixedGamma

View = Callable[[tuple], object]  # what of a sampled sequence to compare: a position, a pair, ...


def pvalues(outputs: list[tuple], joint: dict[tuple, float], views: dict[str, View]) -> dict[str, float]:
    """One p-value per view: observed counts of view(output) vs the exact marginal of `joint`."""
    result = {}
    for name, view in views.items():
        expected = Counter()
        for seq, prob in joint.items():
            expected[view(seq)] += prob
        result[name] = chi_square_pvalue(Counter(view(o) for o in outputs), expected, len(outputs))
    return result


def chi_square_pvalue(observed: Counter, expected: Counter, n: int) -> float:
    """Pearson chi-square; cells expected fewer than 5 times are pooled into one."""
    if any(count and expected[cell] == 0 for cell, count in observed.items()):
        return 0.0  # an impossible outcome was sampled (e.g. outside top-k / top-p)
    big = [cell for cell, p in expected.items() if p * n >= 5]
    small = [cell for cell, p in expected.items() if 0 < p * n < 5]
    f_exp = [expected[c] * n for c in big]
    f_obs = [observed[c] for c in big]
    if small:
        f_exp.append(sum(expected[c] for c in small) * n)
        f_obs.append(sum(observed[c] for c in small))
    if len(f_exp) < 2:
        return 1.0  # one possible outcome, and nothing impossible was seen
    scale = n / sum(f_exp)  # the exact probabilities sum to 1 only up to rounding
    return float(chisquare(f_obs, [e * scale for e in f_exp]).pvalue)


@torch.inference_mode()
def model_joint(model, prompt: list[int], sampling: SamplingConfig, depth: int = 3) -> dict[tuple, float]:
    """{continuation: probability} of a causal LM's next `depth` tokens after prompt, with the
    sampling processor applied, from a full forward over every prefix with nonzero mass."""
    probs = logits_to_probs(model(input_ids=torch.tensor([prompt], device=model.device)).logits[0, -1].cpu(), sampling)
    joint = {}
    for x in torch.nonzero(probs).flatten().tolist():
        rest = model_joint(model, prompt + [x], sampling, depth - 1) if depth > 1 else {(): 1.0}
        joint.update({(x, *tail): float(probs[x]) * p for tail, p in rest.items()})
    return joint


FIRST_THREE = {"x1": lambda s: s[0], "x2": lambda s: s[1], "x3": lambda s: s[2], "x1x2": lambda s: s[:2]}


def speculative_pvalues(
    target, drafter_model, prompt: list[int], sampling: SamplingConfig, n: int = 1500, gamma: int = 3
) -> tuple[dict[str, float], int]:
    """n seeded 3-token speculative runs (the model drafter, a fixed gamma) against the
    target's exact distribution (model_joint): the p-value of each of FIRST_THREE, and how
    many rounds rejected a draft (a test needs rejections for the check to mean anything).
    A target too sure of its next tokens would leave the check nothing to find: refused."""
    joint = model_joint(target, prompt, sampling)
    assert max(joint.values()) < 0.5, "the target's distribution is nearly one outcome: raise the temperature"
    outputs, rejected = [], 0
    for seed in range(n):
        config = GenerationConfig(max_new_tokens=3, sampling=sampling, seed=seed)
        result = speculative_generate(target, ModelDrafter(drafter_model), prompt, config, FixedGamma(gamma))
        outputs.append(tuple(result.token_ids))
        rejected += sum(step.accepted < len(step.draft_tokens) for step in result.steps[1:])
    return pvalues(outputs, joint, FIRST_THREE), rejected
