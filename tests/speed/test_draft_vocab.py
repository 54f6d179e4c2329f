"""A model drafter over part of the vocabulary (draft_vocab.py) stays lossless.

1. The pieces: which ids are kept, and the restricted head scores them exactly as the
   model's own head does and gives every other id probability 0.
2. Greedy parity with plain decoding on the tiny Qwen2 pairs of conftest, with a limit that
   leaves out most of the 64-token vocabulary, so that the target often wants a token the
   drafter cannot propose (until the output holds it: then the drafter scores it too).
3. Sampling: a tiny Qwen2 pair over 6 tokens with a sharpened head, the drafter restricted
   to ids 0..2 and the prompt's id 4. Until the output holds a 3 or a 5, those come only
   from the residual max(0, p - q); chi-square of new tokens 1..3 against the target's
   exact distribution.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from chi_square import model_joint, pvalues
from conftest import PROMPTS, noisy_copy, tiny_model
from mock_lm import random_trigram

from specbench.bench.costs import measure_costs
from specbench.core.cache import new_cache
from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
from specbench.core.sampling import SamplingConfig, logits_to_probs
from specbench.drafters import ModelForward, make_drafter
from specbench.policies import FixedGamma, make_policy
from specbench.speed.draft_vocab import RestrictedHead, RestrictedStep, covers_output, draft_token_ids, output_head

pytestmark = pytest.mark.usefixtures("single_thread")


def test_draft_token_ids():
    assert draft_token_ids(4, 10, [7, 2, 12, 7]).tolist() == [0, 1, 2, 3, 7]
    assert draft_token_ids(20, 10).tolist() == list(range(10))
    with pytest.raises(ValueError, match="at least one token"):
        draft_token_ids(0, 10)


def test_restricted_head_scores_kept_ids_like_the_model(tiny_pair):
    _, drafter = tiny_pair
    hidden = torch.randn(3, drafter.config.hidden_size)
    full = drafter.lm_head(hidden)
    ids = draft_token_ids(10, full.shape[-1], [40, 63])
    logits = RestrictedHead(output_head(drafter), ids)(hidden)
    assert logits.shape == full.shape
    torch.testing.assert_close(logits[:, ids], full[:, ids])
    left_out = torch.ones(full.shape[-1], dtype=torch.bool)
    left_out[ids] = False
    probs = logits_to_probs(logits, SamplingConfig(temperature=0.7))
    assert probs[:, left_out].sum() == 0 and torch.allclose(probs.sum(-1), torch.ones(3))


@torch.inference_mode()
def test_the_restricted_step_scores_kept_ids_as_the_models_own_forward(tiny_pair):
    """RestrictedStep (the lean forward, then the head) gives the kept ids the logits the
    default step (the model's own forward) gives them, and every other id the lowest value;
    make_drafter plugs it in only for a vocabulary limit."""
    _, drafter = tiny_pair
    prompt = torch.tensor([3, 17, 42, 8, 29])
    step, own = RestrictedStep(10, keep_ids=[63]), ModelForward()
    step.start(drafter, prompt)
    assert step.head.ids.tolist() == [*range(10), 17, 29, 42, 63]
    caches = new_cache(drafter), new_cache(drafter)
    for fed in (prompt, torch.tensor([5]), torch.tensor([40, 2])):  # a prompt, a step, a catch-up
        logits, full = step(drafter, fed[None], caches[0]), own(drafter, fed[None], caches[1])
        assert logits.shape == full.shape == (64,)
        torch.testing.assert_close(logits[step.head.ids], full[step.head.ids])
        assert logits[20] == torch.finfo(logits.dtype).min
    assert isinstance(make_drafter("model", drafter).step, ModelForward) and isinstance(
        make_drafter("model", drafter, 8).step, RestrictedStep
    )


def test_a_model_without_an_output_head_is_refused():
    with pytest.raises(ValueError, match="plain linear output head"):
        make_drafter("model", random_trigram(6, seed=0), vocab_limit=3)


def assert_drafts_kept(result, prompt, limit) -> int:
    """While the drafter is restricted, every draft is an id below the limit, of the prompt,
    or of the output before its round; returns how many such rounds drafted something. The
    restriction ends as the drafter ends it: once covers_output fails for the output so far."""
    seen, missed, tokens, checked = set(prompt) | set(range(limit)), 0, 0, 0
    for step in result.steps:
        assert all(t in seen for t in step.draft_tokens), (step.draft_tokens, seen)
        checked += bool(step.draft_tokens)
        missed += len(set(step.tokens) - seen)
        tokens += len(step.tokens)
        seen |= set(step.tokens)
        if not covers_output(missed, tokens):
            break
    return checked


@pytest.mark.parametrize("policy_name", ["fixed", "cost"])
@pytest.mark.parametrize("pair_name", ["close_pair", "tiny_pair"])
def test_greedy_parity_with_a_restricted_drafter(request, pair_name, policy_name):
    target, drafter_model = request.getfixturevalue(pair_name)
    config = GenerationConfig(max_new_tokens=24)
    costs = SimpleNamespace(c=0.1, verify_cost={k: 1.0 + 0.1 * k for k in range(1, 12)})
    wanted_left_out, restricted_rounds = False, 0
    for prompt in PROMPTS:
        want = plain_generate(target, prompt, config).token_ids
        drafter = make_drafter("model", drafter_model, vocab_limit=16)
        result = speculative_generate(target, drafter, prompt, config, make_policy(policy_name, 4, costs=costs))
        assert result.token_ids == want, (pair_name, policy_name, prompt)
        restricted_rounds += assert_drafts_kept(result, prompt, 16)
        wanted_left_out |= any(t >= 16 and t not in prompt for t in want)
    assert wanted_left_out  # the target wanted ids the drafter could not offer
    assert restricted_rounds > 0


# ---------------------------------------------------------------------------- sampling

VOCAB = 6
PROMPT = [1, 4]
LIMIT = 3  # the drafter scores ids 0, 1, 2 and the prompt's 4; never 3 or 5
SAMPLES = 2000
SAMPLING = SamplingConfig(temperature=1.0)


@pytest.fixture(scope="module")
def six_token_pair():
    """A tiny Qwen2 target over 6 tokens with a peaked head, and a noisy copy as drafter."""
    target = tiny_model(3, layers=1, hidden=16, vocab=VOCAB)
    with torch.no_grad():
        target.lm_head.weight.mul_(40.0)
    return target, noisy_copy(target, scale=0.5, seed=4)


def sample_restricted(target, drafter_model, n=SAMPLES):
    outputs, drafted, accepted = [], 0, 0
    for seed in range(n):
        config = GenerationConfig(max_new_tokens=3, sampling=SAMPLING, seed=seed)
        drafter = make_drafter("model", drafter_model, vocab_limit=LIMIT)
        result = speculative_generate(target, drafter, PROMPT, config, FixedGamma(2))
        outputs.append(tuple(result.token_ids))
        assert_drafts_kept(result, PROMPT, LIMIT)
        for step in result.steps[1:]:
            drafted += len(step.draft_tokens)
            accepted += step.accepted
    return outputs, accepted / drafted


def test_sampling_with_a_restricted_drafter_keeps_the_target_distribution(six_token_pair):
    target, drafter_model = six_token_pair
    joint = model_joint(target, PROMPT, SAMPLING)
    outputs, acceptance = sample_restricted(target, drafter_model)
    views = {
        "x1": lambda s: s[0],
        "x2": lambda s: s[1],
        "x3": lambda s: s[2],
        "x1x2": lambda s: s[:2],
        "x2x3": lambda s: s[1:],
    }
    found = pvalues(outputs, joint, views)
    assert min(found.values()) > 1e-3, found
    # guards: drafts are both kept and rejected, and the left-out ids carry real mass
    assert 0.2 < acceptance < 0.9
    left_out = sum(prob for seq, prob in joint.items() if seq[1] in (3, 5))
    assert left_out > 0.1


def test_costs_time_the_restricted_drafter(tiny_pair):
    target, drafter = tiny_pair
    costs = measure_costs(target, drafter, list(range(1, 20)), repeats=1, max_k=2, draft_vocab=8)
    assert costs.c is not None and costs.c > 0


def test_the_head_keeps_ids_the_output_gains(tiny_pair):
    _, drafter = tiny_pair
    head = RestrictedHead(output_head(drafter), draft_token_ids(4, 64))
    first_rows = head.first[0].weight.data_ptr()
    assert head.add(torch.tensor([50, 2, 50, 70, -1])) == 1  # 2 is kept already; 70 and -1 do not exist
    assert head.add(torch.tensor([61, 50])) == 1
    assert head.ids.tolist() == [0, 1, 2, 3, 50, 61] and head.size == 6
    assert head.first[0].weight.data_ptr() == first_rows  # the rows it started with are not copied again
    assert first_rows == drafter.lm_head.weight.data_ptr()  # ids 0..3 are a view of the head's rows
    hidden = torch.randn(drafter.config.hidden_size)
    logits, full = head(hidden), drafter.lm_head(hidden)
    torch.testing.assert_close(logits[head.ids], full[head.ids])
    left_out = torch.ones(64, dtype=torch.bool)
    left_out[head.ids] = False
    assert (logits[left_out] == torch.finfo(logits.dtype).min).all()


def test_covers_output():
    assert covers_output(2, 20) and not covers_output(3, 40) and covers_output(3, 60)


def test_the_drafter_scores_every_id_once_the_output_strays(tiny_pair):
    """Two ids from outside the subset are kept; a third within 40 tokens gives it up."""
    _, model = tiny_pair
    drafter = make_drafter("model", model, vocab_limit=8)
    prompt = [1, 2, 3]
    drafter.prefill(torch.tensor(prompt))
    context = prompt + [50, 51] + [1] * 30  # 2 misses over 32 output tokens
    drafter.propose(torch.tensor(context), 2, lambda step, q, token=None: True)
    assert drafter.step.head is not None and {50, 51} <= set(drafter.step.head.ids.tolist())
    drafter.commit(0)
    drafter.propose(torch.tensor(context + [60]), 2, lambda step, q, token=None: True)
    assert drafter.step.head is None
