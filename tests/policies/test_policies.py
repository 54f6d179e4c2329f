"""Gamma policies on scripted outcomes and scripted distributions (no models).

A round is driven the way core/generate.py drives it: next_gamma(), keep_drafting(step, q) per
draft step until it says stop or the drafter runs out, update(n_accepted, n_drafted), info().
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from transformers.generation.candidate_generator import AssistedCandidateGenerator

from specbench.core.stats import verify_cost_at
from specbench.policies import (
    POLICIES,
    Calibration,
    CostAwareGamma,
    EntropyGuidedGamma,
    FixedGamma,
    HeuristicGamma,
    Keep,
    ThresholdStop,
    confidence_to_gamma,
    make_policy,
    normalized_entropy,
)
from specbench.policies import calibration as calibration_module
from specbench.policies.calibration import keep

V = 16
# costs for the "cost" policy: a CPU-like verify curve (a jump at k = 2) and a cheap drafter
COSTS = SimpleNamespace(c=0.1, verify_cost={k: 1.0 + 0.3 * (k > 1) + 0.05 * (k - 1) for k in range(1, 12)})


def uniform(v: int = V) -> torch.Tensor:
    return torch.full((v,), 1.0 / v)


def one_hot(token: int = 0, v: int = V) -> torch.Tensor:
    row = torch.zeros(v)
    row[token] = 1.0
    return row


def with_entropy(h: float, v: int = V) -> torch.Tensor:
    """A row whose normalized entropy is h: uniform over the first round(v ** h) tokens.

    Only exact for h in {0, 1/4, 1/2, 3/4, 1} with v = 16 (2 ** (4h) tokens).
    """
    k = round(v**h)
    row = torch.zeros(v)
    row[:k] = 1.0 / k
    return row


def run_round(
    policy,
    rows: list[torch.Tensor | None],
    n_accepted: int | None = None,
    tokens: list[int] | None = None,
    next_token: int | None = None,
) -> int:
    """One round with one row per draft the drafter could make; returns how many were drafted.

    n_accepted None means all drafted tokens are accepted. tokens, when given, are passed
    with the rows (a table drafter's: rows None); next_token is what the target emits after
    the kept drafts. A row with q is asked for as a model drafter asks (forward_pays, one id
    fed), a row without as a table drafter drafts (no forward to ask about).
    """
    gamma = policy.next_gamma()
    drafted = 0
    for step, row in enumerate(rows[:gamma]):
        if row is not None and not policy.forward_pays(step, 1):
            break
        say = policy.keep_drafting(step, row) if tokens is None else policy.keep_drafting(step, row, tokens[step])
        if not say:
            break
        drafted += 1
        if say == Keep.LAST:
            break
    policy.update(drafted if n_accepted is None else min(n_accepted, drafted), drafted, next_token)
    return drafted


# ---------------------------------------------------------------------------- signals


def test_normalized_entropy_ends_and_middle():
    assert normalized_entropy(one_hot()) == pytest.approx(0.0, abs=1e-6)
    assert normalized_entropy(uniform()) == pytest.approx(1.0)
    assert normalized_entropy(with_entropy(0.5)) == pytest.approx(0.5)  # uniform over 4 of 16
    assert normalized_entropy(torch.tensor([1.0])) == 0.0  # V = 1: no log(1) division


@pytest.mark.parametrize(
    "c, expected",
    [
        (0.0, 1),
        (0.10, 1),
        (0.2499, 1),
        (0.25, 2),
        (0.30, 2),
        (0.60, 3),
        (0.75, 4),
        (0.80, 4),
        (1.0, 4),
        (1.7, 4),
        (-0.2, 1),
    ],
)
def test_confidence_to_gamma_equal_bins(c, expected):
    """Guards the documented mapping, and that gamma_max is reached before c = 1."""
    assert confidence_to_gamma(c, 1, 4) == expected


def test_confidence_to_gamma_single_level():
    assert confidence_to_gamma(0.0, 3, 3) == confidence_to_gamma(1.0, 3, 3) == 3


# ---------------------------------------------------------------------------- fixed / heuristic


def test_fixed_never_moves():
    policy = FixedGamma(3)
    for n_accepted in (3, 0, 1, 3):
        assert run_round(policy, [None] * 10, n_accepted) == 3
    assert policy.next_gamma() == 3
    assert policy.info() == {}


def test_heuristic_sequence():
    """+2 after a fully accepted draft, -1 otherwise, never below 1."""
    policy = HeuristicGamma(4)
    outcomes = [(4, 4), (2, 6), (0, 5), (0, 4), (0, 3), (0, 2), (0, 1), (0, 1), (1, 1), (3, 3)]
    seen = []
    for n_accepted, n_drafted in outcomes:
        seen.append(policy.next_gamma())
        policy.update(n_accepted, n_drafted)
    assert seen == [4, 6, 5, 4, 3, 2, 1, 1, 1, 3]
    assert policy.next_gamma() == 5


def test_heuristic_all_means_all_drafted_not_gamma():
    """HF compares with the candidates actually drafted: 2 of 2 at gamma 6 is 'all'."""
    policy = HeuristicGamma(6)
    policy.next_gamma()
    policy.update(2, 2)
    assert policy.next_gamma() == 8


def test_heuristic_empty_round_leaves_gamma():
    """Deviation from HF (documented): a round that drafted nothing teaches nothing."""
    policy = HeuristicGamma(4)
    policy.next_gamma()
    policy.update(0, 0)
    assert policy.next_gamma() == 4


def test_heuristic_floor_and_cap():
    policy = HeuristicGamma(3, gamma_min=2, gamma_max=6)
    seen = []
    for n_accepted, n_drafted in [(0, 3), (0, 2), (2, 2), (4, 4), (6, 6), (0, 6)]:
        seen.append(policy.next_gamma())
        policy.update(n_accepted, n_drafted)
    assert seen == [3, 2, 2, 4, 6, 6]
    assert policy.next_gamma() == 5


def test_heuristic_info_reports_this_round_after_update():
    """The loop calls info() after update(): it must still show the round's own gamma."""
    policy = HeuristicGamma(4)
    policy.next_gamma()
    policy.update(4, 4)
    assert policy.info() == {"gamma": 4, "next_gamma": 6}


def hf_schedule(start: int, outcomes: list[tuple[int, int]]) -> list[int]:
    """transformers' own update_candidate_strategy, run on a stand-in for the generator."""
    config = SimpleNamespace(num_assistant_tokens_schedule="heuristic", assistant_confidence_threshold=None)
    gen = SimpleNamespace(assistant_generation_config=config, num_assistant_tokens=start)
    seen = []
    for n_accepted, n_drafted in outcomes:
        seen.append(int(gen.num_assistant_tokens))
        scores = torch.zeros(1, n_drafted + 1, 2)  # HF: len(scores[0]) - 1 candidates
        AssistedCandidateGenerator.update_candidate_strategy(gen, None, scores, n_accepted)
    return seen


def test_heuristic_matches_installed_transformers():
    """Guards against drifting from HF's rule as installed (rounds with >= 1 draft)."""
    outcomes = [(5, 5), (3, 7), (6, 6), (0, 8), (0, 7), (2, 2), (1, 9), (0, 8), (0, 1), (0, 1), (1, 1)]
    policy = HeuristicGamma(5)
    ours = []
    for n_accepted, n_drafted in outcomes:
        ours.append(policy.next_gamma())
        policy.update(n_accepted, n_drafted)
    assert ours == hf_schedule(5, outcomes)


# ---------------------------------------------------------------------------- egag


def test_egag_gamma_from_first_step_entropy():
    """gamma_min=1, gamma_max=5 (L=5): h=1 -> c=0 -> 1; h=.5 -> c=.5 -> 1+floor(2.5)=3;
    h=.25 -> c=.75 -> 1+floor(3.75)=4; h=0 -> 5."""
    policy = EntropyGuidedGamma(1, 5)
    got = []
    for h in (1.0, 0.5, 0.25, 0.0):
        # later rows are uniform: only step 0 decides
        got.append(run_round(policy, [with_entropy(h)] + [uniform()] * 9))
        assert policy.info()["gamma"] == got[-1]
        assert policy.info()["entropy"] == pytest.approx(h, abs=1e-6)
    assert got == [1, 3, 4, 5]


def test_egag_reaches_gamma_max_below_zero_entropy():
    """A plain floor((1-h) * gamma_max) reaches gamma_max only at h = 0; the bins do not."""
    policy = EntropyGuidedGamma(1, 4)
    row = torch.tensor([0.97] + [0.03 / (V - 1)] * (V - 1))
    assert 0.0 < normalized_entropy(row) < 0.25
    assert run_round(policy, [row] * 10) == 4


def test_egag_next_gamma_is_the_upper_bound():
    policy = EntropyGuidedGamma(2, 6)
    assert policy.next_gamma() == 6
    assert policy.keep_drafting(0, uniform()) is True  # gamma_min = 2 allows steps 0 and 1
    assert policy.keep_drafting(1, uniform()) is True
    assert policy.keep_drafting(2, uniform()) is False


def test_egag_ema():
    """s_1 = c_1; s_t = beta * s_{t-1} + (1 - beta) * c_t."""
    policy = EntropyGuidedGamma(1, 5, beta=0.5)
    expected_s = [1.0, 0.5, 0.25, 0.625]  # c = 1, 0, 0, 1
    expected_gamma = [5, 3, 2, 4]  # 1 + min(4, floor(5 s))
    for h, s, gamma in zip((0.0, 1.0, 1.0, 0.0), expected_s, expected_gamma):
        assert run_round(policy, [with_entropy(h)] * 10) == gamma
        assert policy.info()["confidence"] == pytest.approx(s, abs=1e-6)


def test_egag_without_q_follows_acceptance():
    """Drafters without q: c = the last round's acceptance ratio, 1.0 at first."""
    policy = EntropyGuidedGamma(1, 4)
    assert run_round(policy, [None] * 10, n_accepted=1) == 4  # c = 1 -> 4; then 1/4 accepted
    assert policy.info() == {"acceptance": 1.0, "confidence": 1.0, "gamma": 4}
    assert run_round(policy, [None] * 10, n_accepted=0) == 2  # c = .25 -> 1 + floor(1) = 2
    assert run_round(policy, [None] * 10) == 1  # c = 0 -> 1; all of 1 accepted
    assert run_round(policy, [None] * 10) == 4  # c = 1


def test_egag_round_without_step_zero_has_empty_info():
    """No draft step (n-gram drafter found no match): nothing decided, and the EMA holds."""
    policy = EntropyGuidedGamma(1, 4)
    run_round(policy, [None] * 10, n_accepted=2)  # acceptance 2/4
    assert run_round(policy, []) == 0
    assert policy.info() == {}
    assert run_round(policy, [None] * 10) == 3  # c = .5 from the round before the empty one


# ---------------------------------------------------------------------------- stop policies


def test_entropy_stop_at_first_flat_step():
    policy = ThresholdStop(6, threshold=0.6, signal="entropy")
    rows = [with_entropy(0.0), with_entropy(0.5), with_entropy(0.25), with_entropy(0.75), one_hot()]
    assert run_round(policy, rows) == 3
    info = policy.info()
    assert info["stopped_at"] == 3 and info["threshold"] == 0.6
    assert info["entropy"] == pytest.approx(0.75)


def test_entropy_stop_runs_to_gamma_max_and_reports_worst_step():
    policy = ThresholdStop(3, threshold=0.6, signal="entropy")
    assert run_round(policy, [with_entropy(0.25), with_entropy(0.5), one_hot(), uniform()]) == 3
    assert policy.info()["stopped_at"] is None
    assert policy.info()["entropy"] == pytest.approx(0.5)


def test_confidence_stop_on_top_prob():
    policy = make_policy("confidence-stop", 5, threshold=0.4)
    rows = [one_hot(), torch.tensor([0.5, 0.5] + [0.0] * (V - 2)), torch.tensor([0.2] * 5 + [0.0] * (V - 5)), one_hot()]
    assert run_round(policy, rows) == 2
    assert policy.info() == {"stopped_at": 2, "top_prob": pytest.approx(0.2), "threshold": 0.4}


def test_stop_may_stop_at_step_zero():
    policy = ThresholdStop(4, threshold=0.4, signal="top_prob")
    assert run_round(policy, [uniform()] * 4) == 0
    assert policy.info()["stopped_at"] == 0


def test_stop_policies_never_stop_without_q():
    for name in ("entropy-stop", "confidence-stop"):
        policy = make_policy(name, 4)
        assert run_round(policy, [None] * 10) == 4
        assert policy.info()["stopped_at"] is None


def test_stop_state_resets_each_round():
    policy = ThresholdStop(4, threshold=0.4, signal="top_prob")
    run_round(policy, [uniform()])
    assert run_round(policy, [one_hot()] * 4) == 4
    assert policy.info() == {"stopped_at": None, "top_prob": 1.0, "threshold": 0.4}


# ---------------------------------------------------------------------------- factory


def test_make_policy_builds_each_name():
    kinds = {
        "fixed": FixedGamma,
        "heuristic": HeuristicGamma,
        "egag": EntropyGuidedGamma,
        "entropy-stop": ThresholdStop,
        "confidence-stop": ThresholdStop,
        "cost": CostAwareGamma,
    }
    assert set(POLICIES) == set(kinds)
    for name in POLICIES:
        policy = make_policy(name, 4, costs=COSTS)
        assert isinstance(policy, kinds[name]) and policy.name == name


def test_make_policy_defaults():
    assert make_policy("egag", 6).next_gamma() == 6  # gamma_max defaults to gamma
    assert make_policy("egag", 6, gamma_min=2, gamma_max=9).next_gamma() == 9
    assert make_policy("entropy-stop", 5).threshold == 0.15
    assert make_policy("confidence-stop", 5).threshold == 0.4
    assert make_policy("heuristic", 3).gamma_max is None


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        ("nope", {}, "unknown gamma policy"),
        ("fixed", {"gamma": 0}, "gamma must be"),
        ("egag", {"gamma_min": 5, "gamma_max": 3}, "must not exceed"),
        ("egag", {"gamma": 2, "gamma_min": 3}, "egag's gamma-max"),
        ("egag", {"egag_beta": 1.0}, "egag-beta"),
        ("egag", {"egag_beta": -0.1}, "egag-beta"),
        ("fixed", {"gamma_min": 0}, "gamma-min must be"),
        ("entropy-stop", {"threshold": 0.0}, "threshold"),
        ("confidence-stop", {"threshold": 1.5}, "threshold"),
        ("heuristic", {"gamma": 8, "gamma_max": 6}, "outside"),
    ],
)
def test_make_policy_rejects_bad_arguments(name, kwargs, message):
    kwargs = {"gamma": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        make_policy(name, **kwargs)


# ---------------------------------------------------------------------------- cost


def peaked(top: float, v: int = V) -> torch.Tensor:
    """A row whose largest probability is `top` (on token 0), the rest spread evenly."""
    row = torch.full((v,), (1.0 - top) / (v - 1))
    row[0] = top
    return row


def keep_questions_only(policy: CostAwareGamma) -> CostAwareGamma:
    """The policy with every drafter forward run (no back-off, no round estimate), so that a
    test looks at its keep answers alone."""
    policy.forward_pays = lambda step, feed: True
    return policy


def cost_policy(calibration: Calibration, gamma_max: int = 4, c: float = 0.1) -> CostAwareGamma:
    """A fresh cost policy reading the given calibration (a test's counterfactual)."""
    policy = CostAwareGamma(gamma_max, c=c, verify_cost=COSTS.verify_cost)
    policy.calibration = calibration
    return policy


class RateOne(Calibration):
    """Counterfactual: every token priced at 1 target step (lambda = 1)."""

    def rate(self) -> float:
        return 1.0


class Pooled(Calibration):
    """Counterfactual: step 0's verdicts pooled with the later steps'."""

    def depth(self, step: int) -> int:
        return 0


class OwnRow(Calibration):
    """Counterfactual: the next forward priced by this row's own a(m) for a later step, not f(m)."""

    def follow_acceptance(self, b: int) -> float:
        return self.acceptance(1, b)


def test_cost_drafts_confident_steps_and_stops_at_an_unsure_one():
    """Confident rows (top q 0.95 -> prior acceptance 0.95) pay for themselves; a row with top
    q 0.05 cannot: the chance that every draft so far survives falls below its verify cost."""
    policy = CostAwareGamma(6, c=0.1, verify_cost=COSTS.verify_cost)
    assert run_round(policy, [peaked(0.95)] * 3 + [peaked(0.05)] * 3) == 3
    assert policy.info()["stopped_at"] == 3


def test_cost_keeps_a_paid_row_but_does_not_pay_for_one_it_would_refuse():
    """Top q 0.65 (prior acceptance 0.65), c = 0.3, d_i = 0.05 after the jump d_0 = 0.35.
    Step 1: P = 0.4225 beats its verify cost, so the row (already paid for) is kept; the next
    row would bring at most 0.4225 * 0.65 = 0.27 < 0.05 + 0.3, so the drafter is told to stop
    (LAST) rather than make a third forward that the policy would refuse."""
    policy = CostAwareGamma(6, c=0.3, verify_cost=COSTS.verify_cost)
    policy.next_gamma()
    assert policy.keep_drafting(0, peaked(0.65)) == Keep.YES
    assert policy.keep_drafting(1, peaked(0.65)) == Keep.LAST
    assert policy.info() == {
        "p_all": pytest.approx(0.275, abs=1e-3),
        "cost": pytest.approx(0.35),
        "stopped_at": 2,
        "rate": 1.0,
    }


def test_cost_last_step_of_gamma_max_is_last():
    policy = CostAwareGamma(2, c=0.0, verify_cost=COSTS.verify_cost)
    policy.next_gamma()
    assert [policy.keep_drafting(i, peaked(0.95)) for i in range(2)] == [Keep.YES, Keep.LAST]
    assert policy.info()["stopped_at"] is None


def test_cost_refuses_step_zero_then_skips_the_drafter_with_growing_backoff():
    """A refused first step wasted one drafter step: the next rounds decline the drafter's
    forward (a copy could still be drafted), 1 round after the first refusal, 2 after the
    second, 4 after the third; the round after a back-off probes the drafter again."""
    policy = CostAwareGamma(4, c=0.3, verify_cost=COSTS.verify_cost)
    pattern = []
    for _ in range(10):
        assert policy.next_gamma() == 4
        pattern.append(policy.forward_pays(0, 1))
        if pattern[-1]:
            assert not policy.keep_drafting(0, uniform())
        else:
            assert policy.info() == {"skipped": "back-off"}
        policy.update(0, 0)
    assert pattern == [True, False, True, False, False, True, False, False, False, False]


def test_cost_backs_off_after_a_round_whose_kept_drafts_the_drafter_dropped():
    """A round that paid for a drafter forward and drafted nothing wasted it, also when the
    policy kept the draft: the translated drafter drops a last target token that the next
    drafter token could still change, and a policy that stops after one drafter token (a
    drafter dearer than a verify row, c 0.9) gets no draft at all. The next round is plain,
    as after a refusal; a round that drafts resets the back-off."""
    policy = CostAwareGamma(4, c=0.9, verify_cost=COSTS.verify_cost)
    policy.round_gain = lambda: 1.0  # the round estimate out of the way: the back-off alone
    assert policy.next_gamma() == 4 and policy.forward_pays(0, 1)
    assert policy.keep_drafting(0, peaked(0.95)) == Keep.LAST
    policy.update(0, 0)  # the drafter kept none of it
    policy.next_gamma()
    assert not policy.forward_pays(0, 1) and policy.info() == {"skipped": "back-off"}
    policy.update(0, 0)
    policy.next_gamma()
    assert policy.forward_pays(0, 1)  # the probe
    assert policy.keep_drafting(0, peaked(0.95)) == Keep.LAST
    policy.update(1, 1)  # this time the draft reached the target
    assert policy._skip == 0
    policy.next_gamma()
    assert policy.forward_pays(0, 1)


def test_cost_learns_that_a_confidence_level_is_rejected():
    """Calibration: top q 0.75 starts as acceptance 0.75 (drafted), but after the target
    rejects such drafts again and again, the same rows are no longer drafted."""
    policy = keep_questions_only(CostAwareGamma(4, c=0.1, verify_cost=COSTS.verify_cost))  # not the back-off
    assert run_round(policy, [peaked(0.75)] * 4, n_accepted=0) >= 1
    for _ in range(30):
        run_round(policy, [peaked(0.75)] * 4, n_accepted=0)
    assert run_round(policy, [peaked(0.75)] * 4) == 0


def test_cost_prices_drafts_at_the_rate_the_generation_runs():
    """lambda = tokens / cost so far (prior: 2 rounds of 1 token at cost 1). A round of 4
    accepted drafts yields 5 tokens for 4 * 0.1 + v(5) = 1.9, so lambda = 7 / 3.9; a second
    draft that breaks even against plain decoding (0.19 expected tokens for 0.15) is then
    not worth its cost at the faster rate."""
    fresh = CostAwareGamma(4, c=0.1, verify_cost=COSTS.verify_cost)
    warmed = CostAwareGamma(4, c=0.1, verify_cost=COSTS.verify_cost)
    assert run_round(warmed, [peaked(0.95)] * 4) == 4
    answers = {}
    for name, policy in (("fresh", fresh), ("warmed", warmed)):
        policy.next_gamma()
        answers[name] = [policy.keep_drafting(0, peaked(0.95)), policy.keep_drafting(1, peaked(0.45))]
    assert answers == {"fresh": [Keep.YES, Keep.YES], "warmed": [Keep.YES, Keep.LAST]}
    assert fresh.info()["rate"] == 1.0
    assert warmed.info()["rate"] == pytest.approx(7 / 3.9, abs=1e-3)
    flat = cost_policy(RateOne())  # the same rounds with lambda held at 1: the draft is kept
    run_round(flat, [peaked(0.95)] * 4)
    flat.next_gamma()
    assert [flat.keep_drafting(0, peaked(0.95)), flat.keep_drafting(1, peaked(0.45))] == [Keep.YES, Keep.YES]
    assert flat.info()["rate"] == 1.0


def test_cost_rejections_at_step_zero_do_not_condemn_later_steps(monkeypatch):
    """Step 0 and later steps have their own calibration: after rows of top q 0.75 failed
    again and again as the first draft, the same confidence after an accepted-looking first
    draft still counts as 0.75. The pooled counterfactual shows the difference is the split.
    (The tables' split alone: the generation's tilt, which pools the steps, is off.)"""
    monkeypatch.setattr(calibration_module, "TILT_PRIOR", float("inf"))
    drafted = {}
    for split, calibration in ((True, Calibration()), (False, Pooled())):
        policy = keep_questions_only(cost_policy(calibration))  # the decisions, not the back-off
        for _ in range(30):
            run_round(policy, [peaked(0.75)] * 4, n_accepted=0)
        assert run_round(policy, [peaked(0.75)] * 4) == 0
        drafted[split] = run_round(policy, [peaked(0.95)] + [peaked(0.75)] * 3)
    assert drafted == {True: 4, False: 2}  # pooled, the failures at step 0 stop step 1


def test_cost_prices_the_next_forward_by_what_followed_this_confidence():
    """Every round: a confident first draft (top q 0.95) that the target accepts, then an
    unsure row (top q 0.35) whose draft is rejected, or refused once that is learned. Rows of
    0.95 never appear after step 0, so the row's own a(0.95) for later steps stays at its prior
    and the old rule keeps paying a forward for step 1. f(0.95) learns that the forward after
    such a draft yields nothing, and the round stops after step 0 (LAST)."""
    answers = {}
    for follow, calibration in ((True, Calibration()), (False, OwnRow())):
        policy = cost_policy(calibration)
        for _ in range(30):
            run_round(policy, [peaked(0.95)] + [peaked(0.35)] * 3, n_accepted=1)
        policy.next_gamma()
        answers[follow] = policy.keep_drafting(0, peaked(0.95))
    assert answers == {True: Keep.LAST, False: Keep.YES}


def test_cost_follow_table_counts_a_refused_row_as_a_forward_that_yielded_nothing():
    """After an accepted draft of bin b, the forward for the next draft either yields an
    accepted draft, a rejected one, or a row the policy refuses; only the first counts as a
    success. No forward ran after a LAST: nothing is counted."""
    policy = CostAwareGamma(6, c=0.3, verify_cost=COSTS.verify_cost)
    follow = policy.calibration.follow
    before = (follow.successes[9], follow.trials[9])
    policy.next_gamma()
    assert policy.keep_drafting(0, peaked(0.95)) == Keep.YES
    assert policy.keep_drafting(1, uniform()) == Keep.NO  # the forward ran; its row refused
    policy.update(1, 1)
    assert (follow.successes[9], follow.trials[9]) == (before[0], before[1] + 1)
    policy.next_gamma()
    assert policy.keep_drafting(0, peaked(0.95)) == Keep.YES
    assert policy.keep_drafting(1, peaked(0.95)) == Keep.YES
    assert policy.keep_drafting(2, peaked(0.95)) == Keep.YES
    policy.update(2, 3)  # drafts 0, 1 accepted; draft 2 rejected
    assert (follow.successes[9], follow.trials[9]) == (before[0] + 1, before[1] + 3)


def test_cost_without_q_uses_running_acceptance():
    policy = CostAwareGamma(4, c=0.0, verify_cost={k: 1.0 for k in range(1, 6)})
    assert run_round(policy, [None] * 4) == 4  # free verify and drafter: always draft


def table_round(policy, table: list[int], n_accepted: int, next_token: int | None) -> int:
    """One round of a drafter without q that predicts `table` (core's table_draft: the token
    is passed, probs None); the target accepts n_accepted of what was kept and emits
    next_token. Returns how many were drafted."""
    return run_round(policy, [None] * len(table), n_accepted, tokens=table, next_token=next_token)


# the default pair's verify curve on an AVX-512 CPU (results/gamma-curve): each draft is dear
STEEP = {1: 1.0, 2: 1.12, 3: 1.36, 4: 1.65, 5: 2.21, 6: 2.51, 7: 2.85, 8: 3.17, 9: 3.58}


def test_cost_drafts_an_untried_table_only_as_deep_as_an_even_chance_pays():
    """A table has no confidence to start from, so its first drafts count as even chances
    (Laplace: 1/2, 1/4, ... for the whole run so far). With each draft dear, that is two
    drafts, not gamma_max: when untried tables looked surer the deeper they went, every
    generation's first table rounds drafted 8 and were mostly rejected at the first. Where
    drafts are cheap, a table whose drafts keep surviving earns the cap within rounds."""
    policy = CostAwareGamma(8, c=0.34, verify_cost=STEEP)
    assert table_round(policy, list(range(8)), n_accepted=0, next_token=99) == 2
    cheap = {k: 1.0 + 0.1 * (k - 1) for k in range(1, 10)}  # 1/8 > 0.1 > 1/16: three drafts
    proven = CostAwareGamma(8, c=0.34, verify_cost=cheap)
    rounds = [table_round(proven, list(range(8)), n_accepted=None, next_token=None) for _ in range(6)]
    assert rounds[0] == 3 and rounds[-1] == 8 and rounds == sorted(rounds)


def test_cost_learns_from_the_drafts_without_q_it_refused():
    """A table whose first drafts all fail falls below its price (v(2) is dear) and is
    refused. A refused table draft costs nothing and the target's next token shows its
    verdict, so once the text starts repeating (the refused token is the one the target
    emits) the policy drafts from the table again. Told nothing of the next token, it
    would refuse forever: the old policy on a story that repeats only later."""
    costs = {k: 1.0 + 0.6 * (k > 1) + 0.05 * (k - 1) for k in range(1, 6)}
    drafted = {}
    for told in (True, False):
        policy = CostAwareGamma(4, c=0.0, verify_cost=costs)
        while table_round(policy, [5, 6], n_accepted=0, next_token=9):
            pass  # rejected until refused
        rounds = [table_round(policy, [5, 6], n_accepted=2, next_token=5 if told else None) for _ in range(20)]
        drafted[told] = rounds
    assert drafted[False] == [0] * 20
    assert drafted[True][0] == 0 and drafted[True][-1] == 2


def test_cost_refused_table_drafts_that_would_have_failed_keep_it_refused():
    """The same shadow verdicts, failing (the target emits another token), keep the table
    refused; a refused draft behind a rejected kept draft is not counted (the emitted token
    stands at the rejection, not where the refused draft would have been)."""
    costs = {k: 1.0 + 0.6 * (k > 1) + 0.05 * (k - 1) for k in range(1, 6)}
    policy = CostAwareGamma(4, c=0.0, verify_cost=costs)
    while table_round(policy, [5, 6], n_accepted=0, next_token=9):
        pass
    first = policy.calibration.by_top[0]
    trials = first.trials[Calibration.BINS]
    assert [table_round(policy, [5, 6], n_accepted=0, next_token=9) for _ in range(20)] == [0] * 20
    assert first.trials[Calibration.BINS] == trials + 20 and first.rate(Calibration.BINS) < 0.2
    deeper = CostAwareGamma(4, c=0.0, verify_cost=costs)
    later = deeper.calibration.by_top[1]
    later.successes[Calibration.BINS] = 0.0  # drafts after the first: refused
    for n_accepted, counted in ((0, 0), (1, 1)):
        deeper.next_gamma()
        assert [deeper.keep_drafting(0, None, 5), deeper.keep_drafting(1, None, 6)] == [Keep.YES, Keep.NO]
        before = later.trials[Calibration.BINS]
        deeper.update(n_accepted, 1, 7)  # rejected first draft: 7 is no verdict on the refused 6
        assert later.trials[Calibration.BINS] == before + counted


def test_cost_does_not_learn_from_refused_drafts_with_q():
    """Under sampling a draft of q survives with min(1, p/q), which one emitted token does not
    show: a refused model draft leaves the tables as they were."""
    policy = CostAwareGamma(4, c=0.3, verify_cost=COSTS.verify_cost)
    tables = copy.deepcopy(policy.calibration.by_top)
    policy.next_gamma()
    assert policy.keep_drafting(0, uniform(), 3) == Keep.NO
    policy.update(0, 0, 3)
    assert [t.trials for t in policy.calibration.by_top] == [t.trials for t in tables]


def test_cost_asks_about_every_next_draft_without_q():
    """A draft without q has no drafter forward to save, so after a kept one the policy asks
    about the next (YES) instead of stopping before it (LAST) on the follow table."""
    policy = CostAwareGamma(4, c=0.5, verify_cost=COSTS.verify_cost)
    policy.calibration.follow.successes[Calibration.BINS] = 0.0  # the follow table says stop
    policy.next_gamma()
    assert [policy.keep_drafting(i, None, 5) for i in range(4)] == [Keep.YES, Keep.YES, Keep.YES, Keep.LAST]
    policy.next_gamma()
    assert policy.keep_drafting(0, peaked(0.95), 5) == Keep.LAST  # with q, the follow table still decides


def test_cost_policy_needs_costs_covering_gamma_max():
    with pytest.raises(ValueError, match="needs measured costs"):
        make_policy("cost", 4)
    with pytest.raises(ValueError, match="need v"):
        CostAwareGamma(6, c=0.1, verify_cost={1: 1.0})


def test_cost_extends_a_short_verify_curve_linearly():
    """A sweep measures v(k) up to k = 9; gamma-max 12 needs v(13): continue the mean slope
    from k = 2, and never downwards (noise can make a measured v(9) < v(8))."""
    policy = CostAwareGamma(12, c=0.1, verify_cost={1: 0.5, 2: 0.8, 3: 0.9, 4: 1.0})
    assert policy.v[1] == 1.0 and policy.v[4] == pytest.approx(2.0)
    assert policy.v[13] == pytest.approx(2.0 + 9 * 0.2)
    noisy = CostAwareGamma(12, c=0.1, verify_cost={1: 1.0, 2: 1.2, 3: 1.1, 4: 1.0})
    assert noisy.v[13] == pytest.approx(1.0)


# ---------------------------------------------------------------------------- cost: the drawn token


def test_cost_stops_after_a_draft_drawn_from_the_tail_of_q():
    """Row top q 0.95 (prior acceptance 0.95): drawing that token goes on; drawing a token of
    q 0.003 (bin 0, prior 0.05) keeps it (the row decided that) but drafts no more, since the
    round's drafts now all survive with chance 0.05, not 0.95."""
    answers = {}
    for token in (0, 5):
        policy = CostAwareGamma(6, c=0.1, verify_cost=COSTS.verify_cost)
        policy.next_gamma()
        answers[token] = policy.keep_drafting(0, peaked(0.95), token)
    assert answers == {0: Keep.YES, 5: Keep.LAST}


def test_cost_learns_how_tail_draws_fare():
    """The drawn-token table learns from verdicts: tail draws that keep surviving stop
    stopping the round."""
    policy = CostAwareGamma(6, c=0.1, verify_cost=COSTS.verify_cost)
    answers = []
    for _ in range(3):  # drafts drawn from the tail, accepted anyway
        policy.next_gamma()
        answers.append(policy.keep_drafting(0, peaked(0.95), 5))
        policy.update(1, 1)
    # prior 0.05 (2 pseudo-verdicts), then (0.1 + 1) / 3 = 0.37: 0.37 * 0.95 beats 0.1 + 0.05
    assert answers == [Keep.LAST, Keep.YES, Keep.YES]


def random_rows(generator: torch.Generator, n: int) -> list[torch.Tensor]:
    """Rows from sharp to flat: softmax of scaled random logits."""
    return [
        torch.softmax(torch.randn(V, generator=generator) * float(torch.rand(1, generator=generator)) * 8, 0)
        for _ in range(n)
    ]


def drive(policy, rows: list[torch.Tensor], tokens: list[int | None], accepted: int) -> list[Keep]:
    """One round of the cost policy with the given rows and drawn tokens; the answers."""
    answers = []
    policy.next_gamma()
    for step, (row, token) in enumerate(zip(rows, tokens)):
        answers.append(Keep(int(policy.keep_drafting(step, row, token))))
        if answers[-1] != Keep.YES:
            break
    drafted = sum(a != Keep.NO for a in answers)
    policy.update(min(accepted, drafted), drafted)
    return answers


def test_cost_under_greedy_the_drawn_token_changes_nothing():
    """The greedy draft is the row's argmax, whose q is the row's top q: the same bin and the
    same decisions as a policy that is never told the token (token=None, round after round,
    so the drawn-token tables it learns from are the ones a blind policy learns too)."""
    generator = torch.Generator().manual_seed(0)
    told = CostAwareGamma(8, c=0.2, verify_cost=COSTS.verify_cost)
    blind = CostAwareGamma(8, c=0.2, verify_cost=COSTS.verify_cost)
    kinds = set()
    for _ in range(60):
        rows = random_rows(generator, 8)
        accepted = int(torch.randint(0, 9, (1,), generator=generator))
        a = drive(told, rows, [int(r.argmax()) for r in rows], accepted)
        b = drive(blind, rows, [None] * len(rows), accepted)
        assert a == b
        assert told.info() == blind.info()
        kinds.update(a)
    assert kinds == {Keep.NO, Keep.YES, Keep.LAST}  # the rounds exercised every answer


def test_cost_told_a_sampled_token_answers_otherwise_than_blind():
    """Guards the test above: with sampled tokens the same rounds do get other answers than a
    policy never told the token, so equality under greedy is not equality by construction."""
    generator = torch.Generator().manual_seed(0)
    told = CostAwareGamma(8, c=0.2, verify_cost=COSTS.verify_cost)
    blind = CostAwareGamma(8, c=0.2, verify_cost=COSTS.verify_cost)
    differed = 0
    for _ in range(60):
        rows = random_rows(generator, 8)
        accepted = int(torch.randint(0, 9, (1,), generator=generator))
        tokens = [int(torch.multinomial(r, 1, generator=generator)) for r in rows]
        differed += drive(told, rows, tokens, accepted) != drive(blind, rows, [None] * len(rows), accepted)
    assert differed > 0


def test_cost_keep_answer_never_depends_on_the_drawn_token():
    """Losslessness rule: for any state and row, every token gets the same keep-or-drop
    answer (only YES against LAST may differ), and the drawn token does change some."""
    generator = torch.Generator().manual_seed(1)
    policy = CostAwareGamma(8, c=0.2, verify_cost=COSTS.verify_cost)
    differed = 0
    for _ in range(40):
        rows = random_rows(generator, 8)
        policy.next_gamma()
        drafted = 0
        for step, row in enumerate(rows):
            answers = []
            for token in [None, *range(V)]:  # None: the token-blind answer
                probe = copy.deepcopy(policy)
                answers.append(Keep(int(probe.keep_drafting(step, row, token))))
            assert len({a == Keep.NO for a in answers}) == 1, answers
            differed += len(set(answers)) > 1
            token = int(torch.multinomial(row, 1, generator=generator))
            answer = policy.keep_drafting(step, row, token)
            drafted += answer != Keep.NO
            if answer != Keep.YES:
                break
        policy.update(min(drafted, int(torch.randint(0, 3, (1,), generator=generator))), drafted)
    assert differed > 0


# ---------------------------------------------------------------------------- cost: a recorded replay


def scripted_rounds(policy, seed: int, rounds: int) -> tuple[str, dict]:
    """Rounds of random rows (one in five without q), sampled tokens and random verdicts; each
    round's answers as letters (N, Y, L; "-" for a round that drafted nothing; "x" for a
    forward the policy declined) and the last info()."""
    generator = torch.Generator().manual_seed(seed)
    letters = []
    for _ in range(rounds):
        said = ""
        for step in range(policy.next_gamma()):
            if float(torch.rand(1, generator=generator)) < 0.2:
                row, token = None, None
            else:
                row = torch.softmax(
                    torch.randn(V, generator=generator) * float(torch.rand(1, generator=generator)) * 8, 0
                )
                token = int(torch.multinomial(row, 1, generator=generator))
                if not policy.forward_pays(step, 1):
                    said += "x"
                    break
            answer = Keep(int(policy.keep_drafting(step, row, token)))
            said += "NYL"[answer]
            if answer != Keep.YES:
                break
        drafted = len(said.rstrip("x")) - said.rstrip("x").endswith("N")
        policy.update(int(torch.randint(0, drafted + 1, (1,), generator=generator)), drafted)
        letters.append(said or "-")
    return " ".join(letters), policy.info()


# recorded when the back-off moved from skipping rounds to declining the drafter's first
# forward (forward_pays), with the round estimate beside it: "x" marks a declined forward.
# Without the generation's tilt (calibration.TILT_PRIOR infinite) the policy still answers so.
UNTILTED = {
    0: (
        "L YYYL YL x YL YL N x L YL YL x N YYL x x L YYYL x x x x YYL L YL YYL YYYYL YYYL L YYYL YYN N x YL N x x "
        "YL L YL YL YYYL YYYL YYL YN YYYL YL YL YYL YL YYYYYL YL YYL YL YYL YYYL L YL L YL",
        {"p_all": 0.221, "cost": 0.237, "stopped_at": 2, "rate": 1.187},
    ),
    1: (
        "YYL N x L YYYYL YL L YL YL L YL N x L YYN L YYL YL N x L N x N x x YL YYYL YL N x N x x YL L N x N x "
        "x L YL YYL YYYL YL L N x YL L YL YYL N YYYL YL YYYL x N x",
        {"skipped": "back-off"},
    ),
}

# recorded when the generation's tilt (calibration.TILT_PRIOR = 2) came in
RECORDED = {
    0: (
        "L YYYL YL x YN N YN x YYL YN x x N x x x YYN x L x N x x YYL L YL YYL YYYYL YL YL YYYYL YYN N x YL N x x "
        "YYYL YL YL L YL YYYL YYL YN YYYL YL YL YYL YL L YYYYL L YYN YYYL L YYL YN L",
        {"p_all": 0.007, "cost": 0.242, "stopped_at": 1, "rate": 1.209},
    ),
    1: (
        "YYL N x YYYL YL YL YYL YYL L YL N x L YYN L YYL YL N x L N x N x x YYL YYN YL N x N x x YL YN N x N x "
        "x L N YYL x YL YL x x x YL L YL YYL N YL x YYYYL YL YL YYL",
        {"p_all": 0.026, "cost": 0.223, "stopped_at": 3, "rate": 1.113},
    ),
}


@pytest.mark.parametrize("seed", RECORDED)
def test_cost_replays_the_recorded_decisions(seed, monkeypatch):
    """Guards refactoring: the same rows, tokens and verdicts give the same answers, back-offs
    and final state as the recorded policy did, round for round; and without the tilt, those
    of the policy before it."""
    assert scripted_rounds(CostAwareGamma(6, 0.15, COSTS.verify_cost), seed, 60) == RECORDED[seed]
    monkeypatch.setattr(calibration_module, "TILT_PRIOR", float("inf"))
    assert scripted_rounds(CostAwareGamma(6, 0.15, COSTS.verify_cost), seed, 60) == UNTILTED[seed]


# ---------------------------------------------------------------------------- cost: pricing a forward before it runs


def test_cost_weighs_a_long_catch_up_against_the_tokens_left():
    """The model drafter reads the prompt only in its first model round: a forward over many
    ids, c * (u(n) - 1) above one step. Near the end of a short generation it cannot be
    earned back and is declined; with the whole of max_new_tokens ahead it runs. Without
    u(n) or a horizon every forward runs; a forward of one id is never a catch-up."""
    u = {n: 1.0 + 0.2 * (n - 1) for n in range(1, 10)}  # u(200) = 40.8 by the one extrapolation rule
    short = CostAwareGamma(4, c=0.3, verify_cost=COSTS.verify_cost, drafter_cost=u, max_new_tokens=16)
    long = CostAwareGamma(4, c=0.3, verify_cost=COSTS.verify_cost, drafter_cost=u, max_new_tokens=512)
    for policy in (short, long):
        policy.next_gamma()
    assert not short.forward_pays(0, 200) and short.info() == {"skipped": "catch-up"}
    assert short.forward_pays(0, 1) and short.forward_pays(1, 200)  # later steps were priced by their keep answer
    assert long.forward_pays(0, 200)
    unpriced = CostAwareGamma(4, c=0.3, verify_cost=COSTS.verify_cost, max_new_tokens=16)
    unpriced.next_gamma()
    assert unpriced.forward_pays(0, 200)


def test_cost_prices_a_first_forward_at_what_it_fed():
    """A round's first forward over n ids costs c * u(n): after a round whose drafts all
    survived it feeds 2 (the last draft and the target's token), and that catch-up is the
    model round's, in the rate and in what model rounds cost. The generation's first
    forward, the prompt's read, is in the rate only: catch_up_pays weighs it once, against
    the tokens left, and a round that carried it would make the next model round look dear.
    Priced at c alone, the 2-id feeds went uncounted and the policy drafted where its rounds
    cost more than they bought."""
    u = {1: 1.0, 2: 1.5, 9: 5.0}
    c, v = 0.3, COSTS.verify_cost
    policy = CostAwareGamma(4, c=c, verify_cost=v, drafter_cost=u, max_new_tokens=512)
    feeds = (30, 2)  # the prompt's read, then the catch-up after a fully accepted round
    for feed in feeds:
        policy.next_gamma()
        assert policy.forward_pays(0, feed)
        assert policy.keep_drafting(0, one_hot()) == Keep.YES
        assert policy.forward_pays(1, 1) and policy.keep_drafting(1, one_hot())
        policy.update(2, 2)
    seen = policy.calibration.evidence()
    read, catch_up = c * (verify_cost_at(u, 30) - 1.0), c * (u[2] - 1.0)
    rounds = 2 * (2 * c + v[3])  # two forwards of one step and a verify of 3 rows each
    assert seen.rate == pytest.approx((6.0, rounds + read + catch_up))
    assert seen.model == (4.0, 2.0)
    assert seen.model_extra == pytest.approx((rounds - 2.0 + catch_up, 2.0))


def test_a_declined_read_does_not_teach_the_next_generation_to_decline():
    """A generation whose every round declined the catch-up (too short to earn the read back)
    leaves the model rounds' share as it found it: kept and started from, it does not make
    the next, longer generation decline a read that a cold start runs. Counting its tokens
    as rounds without the model lowered the share with every such generation, until a kept
    calibration refused every read."""
    u = {n: 1.0 + 0.2 * (n - 1) for n in range(1, 10)}
    kept = None
    for _ in range(20):  # short generations: the read never pays
        short = CostAwareGamma(4, c=0.3, verify_cost=COSTS.verify_cost, drafter_cost=u, max_new_tokens=16, warm=kept)
        for _ in range(15):
            short.next_gamma()
            assert not short.forward_pays(0, 60) and short.info() == {"skipped": "catch-up"}
            short.update(0, 0)
        kept = keep(kept, short.calibration.evidence())
    assert kept.share == (0.0, 0.0) and kept.rate[0] == 20 * 15
    cold = CostAwareGamma(4, c=0.3, verify_cost=COSTS.verify_cost, drafter_cost=u, max_new_tokens=128)
    warm = CostAwareGamma(4, c=0.3, verify_cost=COSTS.verify_cost, drafter_cost=u, max_new_tokens=128, warm=kept)
    for policy in (cold, warm):
        policy.next_gamma()
        assert policy.forward_pays(0, 60)


def test_cost_stops_paying_for_model_rounds_that_do_not_pay_then_probes(monkeypatch):
    """Model rounds whose drafts are rejected cost c + d_0 and buy nothing: once the round
    estimate goes below zero the drafter's forward is declined (copies could still be
    drafted), for 1, 2, 4... rounds, each back-off ending with a probe; rounds that pay again
    bring the drafter back. (The back-off alone: with the generation's tilt on, the keep
    question refuses these drafts after a few rejections, before the back-off is needed.)"""
    monkeypatch.setattr(calibration_module, "TILT_PRIOR", float("inf"))
    policy = CostAwareGamma(6, c=0.3, verify_cost=COSTS.verify_cost)
    ran = []
    for _ in range(24):
        policy.next_gamma()
        ran.append(policy.forward_pays(0, 1))
        if ran[-1]:
            assert policy.keep_drafting(0, peaked(0.6)) != Keep.NO  # drafted, then rejected
            policy.update(0, 1)
        else:
            assert policy.info()["skipped"] in ("estimate", "back-off")
            policy.update(0, 0)
    assert [i for i, r in enumerate(ran) if r] == [0, 1, 3, 6, 11, 20]  # probes 2, 3, 5, 9 rounds apart
    for _ in range(40):  # the drafter is good again: each probe's round accepts 3 drafts
        policy.next_gamma()
        if policy.forward_pays(0, 1):
            drafted = run_round_from(policy, 0, [peaked(0.99)] * 3)
            policy.update(drafted, drafted)
        else:
            policy.update(0, 0)
    policy.next_gamma()
    assert policy.forward_pays(0, 1) and policy.round_gain() > 0


def run_round_from(policy, step: int, rows: list[torch.Tensor]) -> int:
    """Keep answers for rows from `step` on, once the first forward was agreed; the drafts kept."""
    drafted = 0
    for i, row in enumerate(rows, start=step):
        if i > step and not policy.forward_pays(i, 1):
            break
        say = policy.keep_drafting(i, row)
        if not say:
            break
        drafted += 1
        if say == Keep.LAST:
            break
    return drafted
