"""Self-speculation by early exit (drafters/early_exit.py): greedy parity at every gamma
and exit depth, the target's cache shared and left as the loop left it, the chi-square
test of sampling, and the errors."""

from __future__ import annotations

import pytest
import torch
from chi_square import model_joint, pvalues
from conftest import PROMPTS, tiny_model
from mock_lm import random_trigram

import specbench.core.verify
from specbench.core.cache import cache_arg, cache_length, new_cache
from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
from specbench.core.sampling import SamplingConfig
from specbench.drafters.early_exit import EarlyExitDrafter, EarlyExitModel, parse_early_exit
from specbench.policies import FixedGamma

pytestmark = pytest.mark.usefixtures("single_thread")


def shallow_tail(layers: int = 4, keep: int = 2, vocab: int = 64, scale: float = 0.05, seed: int = 0):
    """A tiny Qwen2 whose layers past `keep` add little (their output projections scaled
    down), so exiting after `keep` layers often, not always, predicts the full model."""
    model = tiny_model(seed, layers=layers, vocab=vocab)
    with torch.no_grad():
        for layer in model.model.layers[keep:]:
            layer.self_attn.o_proj.weight.mul_(scale)
            layer.mlp.down_proj.weight.mul_(scale)
    return model


@pytest.fixture(scope="module")
def target():
    return shallow_tail()


@pytest.mark.parametrize("n_layers", [1, 2, 3])
@pytest.mark.parametrize("gamma", range(1, 9))
def test_greedy_parity_with_plain(target, n_layers, gamma):
    config = GenerationConfig(max_new_tokens=30)
    for prompt in PROMPTS:
        expected = plain_generate(target, prompt, config).token_ids
        result = speculative_generate(target, EarlyExitDrafter(target, n_layers), prompt, config, FixedGamma(gamma))
        assert result.token_ids == expected, (prompt, n_layers, gamma)


def test_parity_runs_accept_and_reject(target):
    """Guards the parity test: exiting after 2 of 4 layers both accepts and rejects."""
    result = speculative_generate(
        target, EarlyExitDrafter(target, 2), PROMPTS[0], GenerationConfig(max_new_tokens=60), FixedGamma(4)
    )
    assert {s.emitted_kind for s in result.steps[1:]} == {"bonus", "correction"}
    assert 0.2 < result.stats.acceptance_rate < 0.95


def test_drafts_are_the_first_layers_with_the_targets_norm_and_head(target):
    """EarlyExitModel's logits equal the target's own decoder stopped after N layers, then
    its final norm and head, computed here by hand."""
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        hidden = target.model(input_ids=ids, output_hidden_states=True).hidden_states[2]  # after 2 layers
        expected = target.lm_head(target.model.norm(hidden))
        model = EarlyExitModel(target, 2)
        got = model(input_ids=ids, **cache_arg(model, new_cache(target)), use_cache=True).logits
    assert torch.allclose(got, expected, atol=1e-5)
    assert target.config.num_hidden_layers == 4  # restored after the call


def test_the_drafter_shares_the_targets_cache_and_leaves_it_as_it_was(target):
    """No prefill of its own (its first forward feeds one token, the last), and after a
    proposal every layer of the target's cache holds what it held before, the same tensors'
    values; the drafter's view grew only the first N layers while it drafted."""
    prompt = torch.tensor(PROMPTS[3])
    cache = new_cache(target)
    with torch.no_grad():
        target(input_ids=prompt[:-1].unsqueeze(0), **cache_arg(target, cache), use_cache=True)
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    drafter = EarlyExitDrafter(target, 2)
    drafter.start(SamplingConfig(), None)
    drafter.prefill(prompt[:-1], cache)  # as the loop: the prompt, then a context one token longer
    seen = []
    draft = drafter.propose(
        prompt,
        5,
        lambda step, probs, token=None: (
            seen.append([cache_length(drafter.cache), cache.layers[3].keys.shape[-2]]) or True
        ),
    )
    assert draft.feeds[0] == 1 and len(draft.tokens) == 5
    assert seen[-1] == [len(prompt) + 4, len(prompt) - 1]  # shared layers grew, the others did not
    for layer, (keys, values) in zip(cache.layers, before):
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)


def test_without_the_targets_cache_it_drafts_over_its_own(target):
    """Used outside the loop (no cache offered), it drafts what it drafts inside it."""
    prompt = torch.tensor(PROMPTS[0])
    cache = new_cache(target)
    with torch.no_grad():
        target(input_ids=prompt[:-1].unsqueeze(0), **cache_arg(target, cache), use_cache=True)
    shared, own = EarlyExitDrafter(target, 2), EarlyExitDrafter(target, 2)
    for drafter in (shared, own):
        drafter.start(SamplingConfig(), None)
    shared.prefill(prompt[:-1], cache)
    own.prefill(prompt[:-1])
    always = lambda step, probs, token=None: True  # noqa: E731
    assert shared.propose(prompt, 6, always).tokens.tolist() == own.propose(prompt, 6, always).tokens.tolist()


def test_names_and_errors(target):
    assert parse_early_exit("early-exit:3") == 3 and parse_early_exit("model") is None
    for bad in ("early-exit:0", "early-exit:x", "early-exit:"):
        with pytest.raises(ValueError, match="N >= 1"):
            parse_early_exit(bad)
    with pytest.raises(ValueError, match="choose N from 1 to 3"):
        EarlyExitDrafter(target, 4)
    with pytest.raises(ValueError, match="cannot exit early"):
        EarlyExitDrafter(random_trigram(6, seed=0), 1)


# ---------------------------------------------------------------------------- sampling

VOCAB = 6
PROMPT = [2, 4]
SAMPLES = 2000
VIEWS = {"x1": lambda s: s[0], "x2": lambda s: s[1], "x3": lambda s: s[2], "x1x2": lambda s: s[:2]}


@pytest.fixture(scope="module")
def small():
    """A 4-layer Qwen2 over 6 ids (its exact distribution over 3 tokens is 216 numbers),
    its head scaled up so that rows are far from uniform and the first layer's differ from
    all four's (a random init gives near-uniform rows, where q = p and nothing is tested)."""
    model = tiny_model(3, layers=4, vocab=VOCAB)
    with torch.no_grad():
        model.lm_head.weight.mul_(10.0)
    return model


def sample_early_exit(model, sampling, rounds=None):
    outputs = []
    for seed in range(SAMPLES):
        config = GenerationConfig(max_new_tokens=4, sampling=sampling, seed=seed)  # room for 2 drafts
        result = speculative_generate(model, EarlyExitDrafter(model, 1), PROMPT, config, FixedGamma(3))
        outputs.append(tuple(result.token_ids[:3]))
        if rounds is not None:
            rounds.extend(result.steps[1:])
    return outputs


def test_early_exit_sampling_follows_the_target(small):
    """q from the first layer, p from all four: the output has p's distribution, and the
    drafts were really rejected as well as accepted."""
    sampling = SamplingConfig(temperature=1.0)
    rounds: list = []
    found = pvalues(sample_early_exit(small, sampling, rounds), model_joint(small, PROMPT, sampling), VIEWS)
    assert min(found.values()) > 1e-3, found
    drafted = sum(len(r.draft_tokens) for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    assert 0.2 * drafted < accepted < 0.9 * drafted, (drafted, accepted)


def test_the_check_fails_for_a_wrong_residual(small, monkeypatch):
    """Power check: in this setting, resampling from p instead of norm(max(0, p - q)) is caught."""
    monkeypatch.setattr(specbench.core.verify, "residual_distribution", lambda p, q: p)
    sampling = SamplingConfig(temperature=1.0)
    found = pvalues(sample_early_exit(small, sampling), model_joint(small, PROMPT, sampling), VIEWS)
    assert min(found.values()) < 1e-6, found
