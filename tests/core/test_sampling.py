"""The one logits processor: temperature, top-k, top-p, and bad logits."""

import math

import pytest
import torch

from specbench.core.sampling import SamplingConfig, choose, entropy, greedy_tokens, logits_to_probs, sample


def test_greedy_rows_are_the_plain_softmax_and_choice_is_argmax():
    logits = torch.tensor([1.0, 3.0, 2.0])
    probs = logits_to_probs(logits, SamplingConfig())
    assert torch.allclose(probs, torch.softmax(logits, -1))
    assert choose(logits, SamplingConfig(), None)[0] == 1


def test_temperature_sharpens_and_flattens():
    logits = torch.tensor([0.0, 1.0])
    cold = logits_to_probs(logits, SamplingConfig(temperature=0.5))
    hot = logits_to_probs(logits, SamplingConfig(temperature=2.0))
    assert cold[1] > torch.softmax(logits, -1)[1] > hot[1]


def test_top_k_keeps_k_tokens():
    probs = logits_to_probs(torch.tensor([4.0, 3.0, 2.0, 1.0]), SamplingConfig(temperature=1.0, top_k=2))
    assert (probs > 0).tolist() == [True, True, False, False]
    assert math.isclose(float(probs.sum()), 1.0, rel_tol=1e-6)


def test_top_p_keeps_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = logits_to_probs(logits, SamplingConfig(temperature=1.0, top_p=0.8))
    assert (probs > 0).tolist() == [True, True, False, False]  # 0.5 + 0.3 reaches 0.8
    assert torch.allclose(probs[:2], torch.tensor([0.625, 0.375]))


def test_top_p_always_keeps_the_top_token():
    probs = logits_to_probs(torch.tensor([5.0, 0.0, 0.0]), SamplingConfig(temperature=1.0, top_p=0.01))
    assert probs.tolist() == [1.0, 0.0, 0.0]


def test_top_k_and_top_p_together():
    logits = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1]))
    probs = logits_to_probs(logits, SamplingConfig(temperature=1.0, top_k=3, top_p=0.6))
    assert (probs > 0).tolist() == [True, True, False, False]


def test_nan_logits_are_impossible_tokens():
    probs = logits_to_probs(torch.tensor([float("nan"), 0.0, 0.0]), SamplingConfig(temperature=1.0))
    assert probs.tolist() == [0.0, 0.5, 0.5]


def test_inf_logit_takes_all_mass_and_all_minus_inf_is_uniform():
    probs = logits_to_probs(torch.tensor([float("inf"), 0.0, 1.0]), SamplingConfig(temperature=0.7))
    assert probs.tolist() == [1.0, 0.0, 0.0]
    dead = logits_to_probs(torch.full((4,), float("-inf")), SamplingConfig(temperature=1.0))
    assert torch.allclose(dead, torch.full((4,), 0.25))
    assert greedy_tokens(torch.tensor([0.0, float("nan"), 2.0])) == 2


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"top_k": -1}, {"top_p": 0.0}, {"top_p": 1.5}])
def test_bad_settings_are_rejected(kwargs):
    with pytest.raises(ValueError):
        SamplingConfig(**kwargs)


def test_sample_is_seeded():
    probs = torch.full((10,), 0.1)
    a = [int(sample(probs, torch.Generator().manual_seed(3))) for _ in range(3)]
    b = [int(sample(probs, torch.Generator().manual_seed(3))) for _ in range(3)]
    assert a == b


def test_sample_follows_probs_and_never_draws_a_zero_probability_token():
    probs = torch.tensor([0.0, 0.1, 0.0, 0.6, 0.3, 0.0])
    ids = sample(probs.expand(100_000, 6), torch.Generator().manual_seed(0))
    counts = torch.bincount(ids, minlength=6)
    assert counts[0] == counts[2] == counts[5] == 0
    expected = 100_000 * probs[[1, 3, 4]]
    chi2 = float((((counts[[1, 3, 4]] - expected) ** 2) / expected).sum())
    assert chi2 < 13.8  # 2 degrees of freedom, p = 0.001


def test_sample_takes_the_last_token_with_mass_when_u_rounds_up_to_the_total(monkeypatch):
    probs = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    monkeypatch.setattr(torch, "rand", lambda *shape, **kw: torch.ones(*shape, dtype=kw.get("dtype")))
    assert sample(probs, None).tolist() == [1, 3]


def test_minus_inf_logits_alone_keep_the_fast_path_and_mean_probability_zero():
    probs = logits_to_probs(
        torch.tensor([[0.0, float("-inf"), 1.0], [2.0, 2.0, float("-inf")]]), SamplingConfig(temperature=1.0)
    )
    assert torch.allclose(probs, torch.tensor([[1 / (1 + math.e), 0.0, math.e / (1 + math.e)], [0.5, 0.5, 0.0]]))


def test_entropy_of_uniform_is_log_v():
    assert math.isclose(float(entropy(torch.full((8,), 1 / 8))), math.log(8), rel_tol=1e-5)
    assert float(entropy(torch.tensor([1.0, 0.0]))) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.999999])
def test_top_p_over_a_large_vocabulary_ranks_candidates_as_a_full_sort_would(top_p):
    """Past TOP_P_CANDIDATES ids, _top_p looks for the nucleus among the most likely ids
    first and sorts the whole row only where their mass falls short: the kept ids and their
    probabilities are those of the whole row sorted, for peaked rows (the nucleus among the
    candidates) and flat ones (it is not), one row at a time or several together."""
    from specbench.core import sampling

    def by_full_sort(probs):
        ranked, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = torch.cumsum(ranked, dim=-1) - ranked
        kept = torch.zeros_like(probs).scatter_(-1, order, ranked.masked_fill(mass_before >= top_p, 0.0))
        return kept / kept.sum(dim=-1, keepdim=True)

    vocab = 4 * sampling.TOP_P_CANDIDATES
    generator = torch.Generator().manual_seed(0)
    peaked = torch.softmax(torch.randn(3, vocab, generator=generator) * 4, dim=-1)
    flat = torch.softmax(torch.randn(3, vocab, generator=generator) * 0.1, dim=-1)
    candidates_mass = lambda rows: torch.topk(rows, sampling.TOP_P_CANDIDATES, dim=-1).values.sum(dim=-1)  # noqa: E731
    assert bool((candidates_mass(flat) < top_p).all())  # flat rows take the full sort
    if top_p == 0.5:
        assert bool((candidates_mass(peaked) >= top_p).all())  # peaked ones the candidates
    for rows in (peaked, flat, torch.cat([peaked, flat])):
        fast = sampling._top_p(rows, top_p)
        assert torch.equal(fast > 0, by_full_sort(rows) > 0)
        assert torch.allclose(fast, by_full_sort(rows), rtol=1e-5, atol=0)
        assert torch.equal(sampling._top_p(rows[:1], top_p), fast[:1])
