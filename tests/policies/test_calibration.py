"""The cost policy's calibration kept between generations: Evidence, warm starts, keep."""

from __future__ import annotations

import json

import pytest
import torch

from specbench.core.protocols import Keep
from specbench.policies import CostAwareGamma, calibration, make_policy
from specbench.policies.calibration import (
    KEEP_TRIALS,
    TABLES,
    WARM_TRIALS,
    Calibration,
    Evidence,
    keep,
    mean_evidence,
)

BINS = Calibration.BINS


def row(top: float, vocab: int = 10) -> torch.Tensor:
    """A q row whose top probability is `top` (on id 0), the rest spread evenly."""
    probs = torch.full((vocab,), (1.0 - top) / (vocab - 1))
    probs[0] = top
    return probs


def evidence_with(table: str, b: int, hits: float, trials: float) -> Evidence:
    empty = Evidence.empty()
    bins = list(empty.tables[table])
    bins[b] = (hits, trials)
    return Evidence({**empty.tables, table: tuple(bins)}, (0.0, 0.0), (0.0, 0.0))


def test_evidence_is_what_was_observed_and_nothing_else():
    """evidence() counts this generation's verdicts: the priors, and a warm start, are left out."""
    for warm in (None, evidence_with("first", 9, 3.0, 10.0)):
        calibration = Calibration(warm)
        calibration.observe([9, 8], [9, 8], n_accepted=1, n_drafted=2, refused_next=False)
        calibration.observe_cost(2, 1.5)
        seen = calibration.evidence()
        assert seen.tables["first"][9] == (1.0, 1.0) and seen.tables["later"][8] == (0.0, 1.0)
        assert seen.tables["follow"][9] == (0.0, 1.0)  # the forward after the accepted draft yielded none
        assert seen.further == (0.0, 1.0) and seen.rate == (2.0, 1.5)
        assert sum(t for name in TABLES for _, t in seen.tables[name]) == 5.0


def test_a_warm_start_moves_the_rates_and_is_capped():
    """Warm evidence adds to the priors, scaled down to WARM_TRIALS per bin with its rate kept,
    so a long history cannot outweigh this generation's own verdicts for long."""
    cold = Calibration()
    warm = Calibration(evidence_with("first", 9, 0.0, 1000.0))  # top-q 0.9+ drafts never survived
    assert cold.acceptance(0, 9) == pytest.approx(0.95)
    assert warm.acceptance(0, 9) == pytest.approx(1.9 / (2.0 + WARM_TRIALS))
    assert warm.acceptance(1, 9) == cold.acceptance(1, 9)  # other tables untouched
    rate = Calibration(Evidence(Evidence.empty().tables, (0.0, 0.0), (3000.0, 1000.0)))
    assert 1.0 < rate.rate() < 3.0 and rate.rate() > cold.rate()


def test_a_warm_start_changes_what_the_cost_policy_drafts():
    """The same confident first row: drafted cold (its bin starts at 0.95), refused warm from
    a history where such drafts never survived."""
    history = evidence_with("first", 9, 0.0, 200.0)
    costs = dict(c=0.1, verify_cost={1: 1.0, 2: 1.3, 3: 1.4})
    cold = CostAwareGamma(4, costs["c"], costs["verify_cost"])
    warm = CostAwareGamma(4, costs["c"], costs["verify_cost"], warm=history)
    for policy in (cold, warm):
        policy.next_gamma()
    assert cold.keep_drafting(0, row(0.97), 0) != Keep.NO
    assert warm.keep_drafting(0, row(0.97), 0) == Keep.NO
    chosen = make_policy("cost", 4, costs=type("C", (), costs)(), warm=history)
    chosen.next_gamma()
    assert chosen.keep_drafting(0, row(0.97), 0) == Keep.NO


def test_keep_sums_and_fades():
    """keep adds a generation's evidence to what was kept and caps each bin at KEEP_TRIALS:
    the oldest verdicts weigh less as new ones come in, the rates stay."""
    kept = None
    for _ in range(40):
        kept = keep(kept, evidence_with("follow", 3, 9.0, 10.0))
    assert kept.tables["follow"][3] == pytest.approx((0.9 * KEEP_TRIALS, KEEP_TRIALS))
    kept = keep(kept, evidence_with("follow", 3, 0.0, 100.0))
    hits, trials = kept.tables["follow"][3]
    assert trials == KEEP_TRIALS and hits / trials == pytest.approx(0.9 * KEEP_TRIALS / (KEEP_TRIALS + 100))


def test_evidence_reads_back_and_refuses_what_it_is_not():
    evidence = evidence_with("later_drawn", BINS, 2.0, 5.0)
    assert Evidence.from_json(json.loads(json.dumps(evidence.as_json()))) == evidence
    good = evidence.as_json()
    broken = [
        {**good, "tables": {**good["tables"], "first": good["tables"]["first"][:-1]}},  # a bin short
        {**good, "rate": [-1.0, 2.0]},
        {**good, "further": [float("nan"), 1.0]},
        {**good, "tables": {**good["tables"], "follow": [[3.0, 1.0]] * (BINS + 1)}},  # hits above trials
        {k: v for k, v in good.items() if k != "further"},
        "not a dict",
    ]
    for raw in broken:
        with pytest.raises(ValueError):
            Evidence.from_json(raw)


def test_kept_evidence_survives_many_generations_through_json():
    """Generations each starting warm from what the last kept (fractional counts, capped)
    and adding their own verdicts: every evidence(), and every kept sum, reads back. Taking
    the warm start back out of float sums left a bin 1 ulp above its trials (3.0000000000000004
    of 3.0), and the file was refused as unreadable on the next run."""
    generator = torch.Generator().manual_seed(0)
    kept = None
    for _ in range(60):
        calibration = Calibration(kept)
        for _ in range(7):
            n = int(torch.randint(1, 5, (), generator=generator))
            bins = torch.randint(0, BINS + 1, (n,), generator=generator).tolist()
            accepted = int(torch.randint(0, n + 1, (), generator=generator))
            calibration.observe(bins, bins, n_accepted=accepted, n_drafted=n, refused_next=accepted == n)
            calibration.observe_cost(accepted + 1, 0.1 + float(torch.rand((), generator=generator)))
            calibration.observe_model_round(accepted, 0.3 * n + 0.17)
        own = calibration.evidence()
        assert all(s <= t for name in TABLES for s, t in own.tables[name])
        assert all(s == int(s) for name in TABLES for s, _ in own.tables[name])  # counted, not subtracted
        assert all(a >= 0 and b >= 0 for a, b in own.pairs().values())
        kept = Evidence.from_json(json.loads(json.dumps(keep(kept, own).as_json())))
        assert all(s <= t for name in TABLES for s, t in kept.tables[name])


def test_a_bin_over_its_trials_by_rounding_alone_reads_as_full():
    """Files kept before the counts were exact may hold a bin 1 ulp over: read as hits = trials."""
    raw = evidence_with("first", 8, 3.0000000000000004, 3.0).as_json()
    assert Evidence.from_json(raw).tables["first"][8] == (3.0, 3.0)


def test_a_generation_is_tilted_by_its_own_record_and_the_tilt_is_not_kept(monkeypatch):
    """Confident first drafts failing (a text the drafter knows less well) lower every bin
    with q, the untried ones too, and leave the copies' bin alone; drafts that survive more
    than the tables expected raise them. evidence() keeps the verdicts, not the tilt."""
    cold = Calibration()
    failing, surviving = Calibration(), Calibration()
    for _ in range(4):
        failing.observe([9], [9], n_accepted=0, n_drafted=1, refused_next=False)
        surviving.observe([5, 5], [5, 5], n_accepted=2, n_drafted=2, refused_next=False)
    for step, b in ((0, 7), (1, 3)):
        assert failing.acceptance(step, b) < cold.acceptance(step, b) < surviving.acceptance(step, b)
    assert failing.follow_acceptance(7) < cold.follow_acceptance(7)
    assert failing.acceptance(0, BINS) == cold.acceptance(0, BINS)  # copies: another drafter
    assert Calibration(failing.evidence()).acceptance(0, 7) == cold.acceptance(0, 7)
    monkeypatch.setattr(calibration, "TILT_PRIOR", float("inf"))  # no tilt
    untilted = Calibration()
    for _ in range(4):
        untilted.observe([9], [9], n_accepted=0, n_drafted=1, refused_next=False)
    assert untilted.acceptance(0, 7) == cold.acceptance(0, 7)


def test_mean_evidence_of_replays():
    policies = [CostAwareGamma(4, 0.1, {1: 1.0, 2: 1.2}) for _ in range(2)]
    for policy, n in zip(policies, (1, 3)):
        policy.calibration.observe_cost(n, 1.0)
    assert mean_evidence(policies).rate == pytest.approx((2.0, 1.0))
    assert mean_evidence([make_policy("fixed", 4)]) is None
