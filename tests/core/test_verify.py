"""verify.py on hand-made probability rows: exact match, Algorithm 1, and its edge cases."""

import torch

from specbench.core.verify import BONUS, CORRECTION, residual_distribution, verify_greedy, verify_sampling


def rows(*values):
    return torch.tensor(values, dtype=torch.float32)


def test_greedy_all_accepted_gives_bonus():
    v = verify_greedy(torch.tensor([3, 1, 2]), torch.tensor([3, 1, 2, 0]))
    assert (v.n_accepted, v.next_token, v.kind) == (3, 0, BONUS)


def test_greedy_first_rejected_gives_target_choice():
    v = verify_greedy(torch.tensor([3, 1]), torch.tensor([2, 1, 0]))
    assert (v.n_accepted, v.next_token, v.kind) == (0, 2, CORRECTION)


def test_greedy_mismatch_in_middle():
    v = verify_greedy(torch.tensor([3, 1, 2]), torch.tensor([3, 0, 2, 1]))
    assert (v.n_accepted, v.next_token, v.kind) == (1, 0, CORRECTION)


def test_greedy_empty_draft_is_a_plain_step():
    v = verify_greedy(torch.tensor([], dtype=torch.long), torch.tensor([4]))
    assert (v.n_accepted, v.next_token, v.kind) == (0, 4, BONUS)


def test_sampling_accepts_when_p_dominates_q():
    """p(x) >= q(x) means min(1, p/q) = 1: every draft is kept, whatever r is."""
    q = rows([0.5, 0.5, 0.0], [0.5, 0.5, 0.0])
    p = rows([0.6, 0.4, 0.0], [0.2, 0.8, 0.0], [0.0, 0.0, 1.0])
    gen = torch.Generator().manual_seed(0)
    v = verify_sampling(torch.tensor([0, 1]), q, p, gen)
    assert (v.n_accepted, v.next_token, v.kind) == (2, 2, BONUS)  # bonus from p[2], one-hot on 2
    assert len(v.draws) == 2


def test_sampling_rejects_token_the_target_forbids_and_samples_residual():
    """p(x) = 0: always rejected; the residual max(0, p - q) puts all mass where p > q."""
    q = rows([1.0, 0.0, 0.0])
    p = rows([0.0, 0.3, 0.7], [1.0, 0.0, 0.0])
    for seed in range(20):
        v = verify_sampling(torch.tensor([0]), q, p, torch.Generator().manual_seed(seed))
        assert v.n_accepted == 0 and v.kind == CORRECTION and v.next_token in (1, 2)


def test_sampling_q_zero_for_drafted_token_does_not_crash_or_nan():
    """q(x) = 0 cannot come from sampling q, but must not divide by zero: accept iff p(x) > 0."""
    q = rows([0.0, 1.0])
    p = rows([0.5, 0.5], [0.5, 0.5])
    v = verify_sampling(torch.tensor([0]), q, p, torch.Generator().manual_seed(0))
    assert v.n_accepted == 1
    p_forbid = rows([0.0, 1.0], [0.5, 0.5])
    v = verify_sampling(torch.tensor([0]), q, p_forbid, torch.Generator().manual_seed(0))
    assert (v.n_accepted, v.next_token) == (0, 1)


def test_one_hot_q_accepts_with_probability_p_and_corrects_from_p_without_x():
    """A drafter without q (n-gram) is a one-hot q: keep x w.p. p(x), else sample p with x removed."""
    p = rows([0.25, 0.25, 0.5], [1 / 3, 1 / 3, 1 / 3])
    accepted, corrections = 0, []
    n = 4000
    for seed in range(n):
        v = verify_sampling(torch.tensor([2]), None, p, torch.Generator().manual_seed(seed))
        if v.n_accepted:
            accepted += 1
        else:
            corrections.append(v.next_token)
    assert abs(accepted / n - 0.5) < 0.03
    assert 2 not in corrections  # the rejected draft can never be the correction
    share_of_0 = corrections.count(0) / len(corrections)
    assert abs(share_of_0 - 0.5) < 0.04


def test_residual_is_normalised_positive_part():
    p, q = rows(0.5, 0.3, 0.2), rows(0.2, 0.6, 0.2)
    assert torch.allclose(residual_distribution(p, q), rows(1.0, 0.0, 0.0))


def test_residual_that_sums_to_zero_falls_back_to_p():
    """p == q: rejection has probability 0; if rounding rejects anyway, p is the exact answer."""
    p = rows(0.5, 0.5)
    assert torch.equal(residual_distribution(p, p.clone()), p)


def test_seeded_verification_is_reproducible():
    q = rows([0.4, 0.6], [0.7, 0.3])
    p = rows([0.6, 0.4], [0.2, 0.8], [0.5, 0.5])
    a = verify_sampling(torch.tensor([1, 0]), q, p, torch.Generator().manual_seed(5))
    b = verify_sampling(torch.tensor([1, 0]), q, p, torch.Generator().manual_seed(5))
    assert a == b
