"""Greedy speculative decoding is plain greedy decoding, token for token; and the stops."""

import pytest
import torch
from conftest import PROMPTS, tiny_model

from specbench.core.generate import ContextLimitError, GenerationConfig, plain_generate, speculative_generate
from specbench.core.sampling import SamplingConfig
from specbench.drafters import ModelDrafter
from specbench.policies import FixedGamma


def spec(target, drafter, prompt, config, gamma, **kw):
    return speculative_generate(target, ModelDrafter(drafter), prompt, config, FixedGamma(gamma), **kw)


@pytest.mark.parametrize("pair", ["tiny_pair", "close_pair"])
@pytest.mark.parametrize("gamma", range(1, 9))
def test_greedy_parity_with_plain(pair, gamma, request):
    target, drafter = request.getfixturevalue(pair)
    config = GenerationConfig(max_new_tokens=30)
    for prompt in PROMPTS:
        expected = plain_generate(target, prompt, config).token_ids
        result = spec(target, drafter, prompt, config, gamma)
        assert result.token_ids == expected, (prompt, gamma)
        assert result.stats.new_tokens == 30


def test_parity_run_really_rejects_and_accepts(close_pair):
    """The parity tests above would prove little if every draft were accepted (or none)."""
    target, drafter = close_pair
    result = spec(target, drafter, PROMPTS[0], GenerationConfig(max_new_tokens=60), 4)
    kinds = {step.emitted_kind for step in result.steps[1:]}
    assert kinds == {"bonus", "correction"}
    assert 0.1 < result.stats.acceptance_rate < 0.95


def test_plain_greedy_matches_transformers_generate(tiny_pair):
    """The baseline itself is checked against an independent implementation."""
    target, _ = tiny_pair
    prompt = PROMPTS[0]
    ours = plain_generate(target, prompt, GenerationConfig(max_new_tokens=25)).token_ids
    theirs = target.generate(
        torch.tensor([prompt]), max_new_tokens=25, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    assert ours == theirs[0, len(prompt) :].tolist()


def test_same_seed_same_output_different_seed_different_output(close_pair):
    target, drafter = close_pair
    sampling = SamplingConfig(temperature=1.0)
    runs = [spec(target, drafter, PROMPTS[0], GenerationConfig(40, sampling, seed=s), 3).token_ids for s in (1, 1, 2)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_stats_count_what_happened(close_pair):
    target, drafter = close_pair
    result = spec(target, drafter, PROMPTS[0], GenerationConfig(max_new_tokens=40), 3)
    s, steps = result.stats, result.steps[1:]
    assert s.rounds == len(steps) and s.target_forwards == s.rounds + 1
    assert s.drafted == sum(len(r.draft_tokens) for r in steps)
    assert s.accepted == sum(r.accepted for r in steps)
    assert s.new_tokens == sum(len(r.tokens) for r in result.steps) == len(result.token_ids)
    assert s.mean_accepted_length == pytest.approx((s.new_tokens - 1) / s.rounds)
    assert all(len(r.draft_probs) == len(r.target_probs) == len(r.draft_tokens) for r in steps)


# ---------------------------------------------------------------------------- stops


def test_eos_mid_round_stops_without_emitting_past_it(close_pair):
    target, drafter = close_pair
    free = plain_generate(target, PROMPTS[0], GenerationConfig(max_new_tokens=40)).token_ids
    eos = free[17]
    cut = free[: free.index(eos) + 1]
    config = GenerationConfig(max_new_tokens=40, eos_token_ids=(eos, 63))
    for gamma in (1, 4, 8):
        result = spec(target, drafter, PROMPTS[0], config, gamma)
        assert result.token_ids == cut and result.stop_reason == "eos"
    assert plain_generate(target, PROMPTS[0], config).token_ids == cut


def test_max_new_tokens_is_exact_for_every_gamma(close_pair):
    target, drafter = close_pair
    for n in (1, 2, 7):
        for gamma in (1, 5, 8):
            result = spec(target, drafter, PROMPTS[1], GenerationConfig(max_new_tokens=n), gamma)
            assert len(result.token_ids) == n and result.stop_reason == "max_new_tokens"


def test_stop_string_cuts_at_the_token_that_completes_it(close_pair):
    target, drafter = close_pair
    decode = lambda ids: "".join(chr(65 + i % 26) for i in ids)  # one letter per token
    free = plain_generate(target, PROMPTS[0], GenerationConfig(max_new_tokens=40)).token_ids
    stop = decode(free[10:12])
    config = GenerationConfig(max_new_tokens=40, stop_strings=(stop,))
    expected = plain_generate(target, PROMPTS[0], config, decode=decode)
    result = spec(target, drafter, PROMPTS[0], config, 6, decode=decode)
    assert result.token_ids == expected.token_ids
    assert result.stop_reason == "stop_string" and decode(result.token_ids).endswith(stop)
    assert stop not in decode(result.token_ids[:-1])


def test_context_limit_shrinks_gamma_and_stops():
    target, drafter = tiny_model(0, max_positions=24), tiny_model(1, layers=1, hidden=16, max_positions=24)
    prompt = PROMPTS[0]  # 5 tokens: room for 19 more
    result = spec(target, drafter, prompt, GenerationConfig(max_new_tokens=100), 8)
    assert len(result.token_ids) == 24 - len(prompt) and result.stop_reason == "context"
    assert result.token_ids == plain_generate(target, prompt, GenerationConfig(max_new_tokens=100)).token_ids


def test_prompt_that_fills_the_context_is_a_clear_error():
    target, drafter = tiny_model(0, max_positions=8), tiny_model(1, max_positions=8)
    with pytest.raises(ContextLimitError, match="context holds 8"):
        spec(target, drafter, list(range(8)), GenerationConfig(max_new_tokens=4), 2)
