"""Speculative sampling follows the target's distribution (chi-square on a small vocabulary).

Model: the trigram mock (tests/mock_lm.py), whose exact distribution over the first three
new tokens we can enumerate. Drafter: the target's table plus noise, so q differs from p and
rejections are frequent. We compare the observed marginals of new tokens 1, 2 and 3 and the
joint of tokens (1, 2) with the exact ones; the same test with a deliberately wrong residual
(sampling corrections from p instead of norm(max(0, p - q))) must fail, which shows the test
has the power to catch the bug it exists for.
"""

from itertools import product

import pytest
from chi_square import pvalues
from mock_lm import noisy_trigram, random_trigram

import specbench.core.verify
from specbench.core.generate import GenerationConfig, speculative_generate
from specbench.core.sampling import SamplingConfig, logits_to_probs
from specbench.drafters import LookupFirstDrafter, ModelDrafter
from specbench.policies import CostAwareGamma, FixedGamma, Keep

VOCAB = 6
PROMPT = [2, 4]
SAMPLES = 3000
SETTINGS = {
    "temperature": SamplingConfig(temperature=1.0),
    "cold": SamplingConfig(temperature=0.6),
    "top-k": SamplingConfig(temperature=1.0, top_k=3),
    "top-p": SamplingConfig(temperature=1.0, top_p=0.7),
    "top-k+top-p": SamplingConfig(temperature=0.9, top_k=4, top_p=0.8),
}


def exact_joint(model, sampling: SamplingConfig, prompt=PROMPT) -> dict[tuple[int, int, int], float]:
    """P(x1, x2, x3 | prompt) under the target with the sampling processor applied."""

    def p(prev, cur):
        return logits_to_probs(model.next_logits(prev, cur), sampling)

    joint = {}
    p1 = p(prompt[-2], prompt[-1])
    for x1, x2, x3 in product(range(VOCAB), repeat=3):
        joint[(x1, x2, x3)] = float(p1[x1] * p(prompt[-1], x1)[x2] * p(x1, x2)[x3])
    return joint


def sample_speculative(
    target, drafter, sampling, gamma=3, n=SAMPLES, prompt=PROMPT, make=ModelDrafter, rounds=None, policy=None
):
    """n seeded 3-token generations; rounds, if a list, collects every run's StepRecords;
    policy() makes each run's gamma policy (default: FixedGamma(gamma))."""
    outputs = []
    for seed in range(n):
        config = GenerationConfig(max_new_tokens=3, sampling=sampling, seed=seed)
        made = policy() if policy is not None else FixedGamma(gamma)
        result = speculative_generate(target, make(drafter), prompt, config, made)
        outputs.append(tuple(result.token_ids))
        if rounds is not None:
            rounds.extend(result.steps[1:])
    return outputs


VIEWS = {"x1": lambda s: s[0], "x2": lambda s: s[1], "x3": lambda s: s[2], "x1x2": lambda s: s[:2]}


@pytest.fixture(scope="module")
def models():
    target = random_trigram(VOCAB, seed=0)
    return target, noisy_trigram(target, scale=1.5, seed=1)


@pytest.mark.parametrize("setting", SETTINGS)
def test_speculative_sampling_matches_target_distribution(models, setting):
    target, drafter = models
    sampling = SETTINGS[setting]
    outputs = sample_speculative(target, drafter, sampling)
    found = pvalues(outputs, exact_joint(target, sampling), VIEWS)
    assert min(found.values()) > 1e-3, found


def test_drafts_are_really_rejected_in_this_setup(models):
    """Guards the test above: with q == p nearly everywhere it would prove nothing."""
    target, drafter = models
    config = GenerationConfig(max_new_tokens=60, sampling=SETTINGS["temperature"], seed=0)
    result = speculative_generate(target, ModelDrafter(drafter), PROMPT, config, FixedGamma(3))
    assert 0.3 < result.stats.acceptance_rate < 0.85


def test_the_check_fails_for_a_wrong_residual(models, monkeypatch):
    """Power check: resampling from p instead of norm(max(0, p - q)) is biased, and caught."""
    target, drafter = models
    monkeypatch.setattr(specbench.core.verify, "residual_distribution", lambda p, q: p)
    sampling = SETTINGS["temperature"]
    outputs = sample_speculative(target, drafter, sampling)
    found = pvalues(outputs, exact_joint(target, sampling), VIEWS)
    assert min(found.values()) < 1e-6, found


# round 1's context ends (2, 5, x1), which occurred before for x1 = 4 and x1 = 1 (then the
# round copies "0 2" or "3 2"; p(x1 in {4, 1}) is about 0.38); other x1 give a model round
LOOKUP_PROMPT = [2, 5, 4, 0, 2, 5, 1, 3, 2, 5]


def test_model_plus_lookup_keeps_the_target_distribution(models):
    """model+lookup mixes copy rounds (one-hot q) with model rounds (the noisy drafter's q);
    both kinds must occur, with rejections, and the output must still follow the target."""
    target, drafter = models
    sampling = SETTINGS["temperature"]
    rounds: list = []
    make = lambda model: LookupFirstDrafter(ModelDrafter(model))
    outputs = sample_speculative(target, drafter, sampling, gamma=2, prompt=LOOKUP_PROMPT, make=make, rounds=rounds)
    copies = [r for r in rounds if r.draft_tokens and r.draft_probs[0] is None]
    modelled = [r for r in rounds if r.draft_tokens and r.draft_probs[0] is not None]
    assert len(copies) > 100 and len(modelled) > 100, (len(copies), len(modelled))
    assert any(r.accepted < len(r.draft_tokens) for r in copies)
    found = pvalues(outputs, exact_joint(target, sampling, LOOKUP_PROMPT), VIEWS)
    assert min(found.values()) > 1e-3, found


# ---------------------------------------------------------------------------- the cost policy

# a cheap drafter and a flat verify curve: the policy drafts, and stops on tail draws
COST = {"gamma_max": 3, "c": 0.05, "verify_cost": {k: 1.0 + 0.1 * (k - 1) for k in range(1, 6)}}


class TokenBlind(CostAwareGamma):
    """The reference for the guard below: the same policy, never told the drawn token."""

    def keep_drafting(self, step, draft_probs, token=None):
        return super().keep_drafting(step, draft_probs)


class TokenPeeking(CostAwareGamma):
    """Wrong on purpose: drops a draft because its own token came out unlikely under q."""

    def keep_drafting(self, step, draft_probs, token=None):
        if token is not None and float(draft_probs[token]) < 0.3:
            return Keep.NO
        return super().keep_drafting(step, draft_probs, token)


def test_cost_policy_reading_the_drawn_token_keeps_the_target_distribution(models):
    """The cost policy lets a drawn token end the round after it (the losslessness rule in
    specbench/policies/__init__.py); the output still follows the target, and the token really
    changed the rounds."""
    target, drafter = models
    sampling = SETTINGS["temperature"]
    outputs = sample_speculative(target, drafter, sampling, policy=lambda: CostAwareGamma(**COST))
    found = pvalues(outputs, exact_joint(target, sampling), VIEWS)
    assert min(found.values()) > 1e-3, found
    # guard: over longer generations, told the token the policy drafts fewer per round
    per_round = {}
    for name, make in (("told", CostAwareGamma), ("blind", TokenBlind)):
        drafted = rounds = 0
        for seed in range(20):
            config = GenerationConfig(max_new_tokens=40, sampling=sampling, seed=seed)
            stats = speculative_generate(target, ModelDrafter(drafter), PROMPT, config, make(**COST)).stats
            drafted, rounds = drafted + stats.drafted, rounds + stats.rounds
        per_round[name] = drafted / rounds
    assert per_round["told"] < 0.95 * per_round["blind"], per_round


def test_a_warm_cost_policy_keeps_the_target_distribution(models):
    """A warm start (the evidence an earlier generation kept, fixed before these begin)
    changes what the policy believes, not what the output follows."""
    target, drafter = models
    sampling = SETTINGS["temperature"]
    earlier = CostAwareGamma(**COST)
    config = GenerationConfig(max_new_tokens=40, sampling=sampling, seed=123)
    speculative_generate(target, ModelDrafter(drafter), PROMPT, config, earlier)
    warm = earlier.calibration.evidence()
    started = CostAwareGamma(**COST, warm=warm).calibration
    assert any(started.acceptance(0, b) != earlier.calibration.acceptance(0, b) for b in range(10)) or (
        started.rate() != CostAwareGamma(**COST).calibration.rate()
    )
    outputs = sample_speculative(target, drafter, sampling, policy=lambda: CostAwareGamma(**COST, warm=warm))
    found = pvalues(outputs, exact_joint(target, sampling), VIEWS)
    assert min(found.values()) > 1e-3, found


def test_the_check_fails_for_a_policy_that_keeps_drafts_by_their_token(models):
    """Power check: keeping a draft only when its token came out likely is biased, and caught."""
    target, drafter = models
    sampling = SETTINGS["temperature"]
    outputs = sample_speculative(target, drafter, sampling, policy=lambda: TokenPeeking(**COST))
    found = pvalues(outputs, exact_joint(target, sampling), VIEWS)
    assert min(found.values()) < 1e-6, found
