"""The loop feeds each model the context it should: every row a round used equals a fresh
forward over the same context.

Misaligned caches do not break losslessness (verification corrects whatever the drafter
proposes), so the parity and chi-square tests cannot see them; they only cost acceptance.
Here every draft's q(token) and the target's p(token) recorded in the StepRecords are
compared with one teacher-forced forward of each model over prompt + output, at temperature
1 (so rounds reject, correct and add bonus tokens), with the model drafter and with
model+lookup (copy rounds leave the drafter's cache behind, and it must catch up).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from conftest import PROMPTS, sharpened

from specbench.core.generate import GenerationConfig, speculative_generate
from specbench.core.sampling import SamplingConfig
from specbench.drafters import make_drafter
from specbench.policies import CostAwareGamma, FixedGamma

pytestmark = pytest.mark.usefixtures("single_thread")

COSTS = SimpleNamespace(c=0.05, verify_cost={k: 1.0 + 0.1 * (k - 1) for k in range(1, 8)})
POLICIES = {"fixed 3": lambda: FixedGamma(3), "cost": lambda: CostAwareGamma(6, COSTS.c, COSTS.verify_cost)}


@pytest.fixture(scope="module")
def peaked_pair(close_pair):
    """close_pair with both heads scaled by 30: a random tiny model's rows are nearly flat,
    which the cost policy would never draft from; peaked rows give it confident and unsure
    steps, and the noisy drafter still disagrees often enough to reject."""
    return tuple(sharpened(model) for model in close_pair)


def teacher_forced(model, ids: list[int]) -> torch.Tensor:
    """softmax rows [len(ids), vocab]: row i is the distribution of the token after ids[:i + 1]."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].float().softmax(-1)


@pytest.mark.parametrize("drafter_name", ["model", "model+lookup"])
@pytest.mark.parametrize("policy_name", POLICIES)
def test_recorded_rows_equal_a_fresh_forward(peaked_pair, drafter_name, policy_name):
    target, drafter_model = peaked_pair
    checked = rejected = 0
    for seed, prompt in enumerate(PROMPTS):
        config = GenerationConfig(max_new_tokens=40, sampling=SamplingConfig(temperature=1.0), seed=seed)
        drafter = make_drafter(drafter_name, drafter_model)
        result = speculative_generate(target, drafter, prompt, config, POLICIES[policy_name]())
        ids = prompt + result.token_ids
        p, q = teacher_forced(target, ids), teacher_forced(drafter_model, ids)
        for record in result.steps[1:]:
            rejected += record.accepted < len(record.draft_tokens)
            # drafts up to the first rejected one saw exactly the output's prefix
            for j in range(min(record.accepted + 1, len(record.draft_tokens))):
                row = len(prompt) + record.position + j - 1
                token = record.draft_tokens[j]
                assert record.target_probs[j] == pytest.approx(float(p[row, token]), abs=1e-4)
                if record.draft_probs[j] is not None:
                    assert record.draft_probs[j] == pytest.approx(float(q[row, token]), abs=1e-4)
                    checked += 1
    assert checked > 50 and rejected > 10, (checked, rejected)


def test_the_check_fails_for_a_drafter_that_skips_a_token_when_catching_up(peaked_pair, monkeypatch):
    """Power check: a drafter that drops the first of several tokens it catches up on (its
    cache then misses a token of the context; still lossless) is caught."""
    from specbench.core.cache import cache_length
    from specbench.drafters import ModelDrafter

    forward = ModelDrafter._forward

    def sloppy_forward(self, new_tokens):
        if cache_length(self.cache) > 0 and new_tokens.shape[0] > 1:
            new_tokens = new_tokens[1:]
        return forward(self, new_tokens)

    monkeypatch.setattr(ModelDrafter, "_forward", sloppy_forward)
    with pytest.raises(AssertionError, match="comparison failed"):
        test_recorded_rows_equal_a_fresh_forward(peaked_pair, "model", "fixed 3")
