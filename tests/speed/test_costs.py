"""costs.py: c and v(k) are measured, and cached per key without half-written files."""

import pytest

from specbench.speed.costs import Costs, fit_verify_curve, for_drafter, load_cached, measure_costs, save_cached
from conftest import tiny_model


def test_measure_costs_on_tiny_models():
    target, drafter = tiny_model(0, layers=2, hidden=32), tiny_model(1, layers=1, hidden=16)
    costs = measure_costs(target, drafter, list(range(1, 20)), repeats=2, max_k=4)
    assert sorted(costs.verify_cost) == [1, 2, 3, 4] and costs.verify_cost[1] == 1.0
    assert sorted(costs.verify_measured) == [1, 2, 3, 4] and costs.verify_measured[1] == 1.0
    assert costs.verify_cost[2] <= costs.verify_cost[3] <= costs.verify_cost[4]  # a line, slope >= 0
    assert costs.c is not None and costs.c > 0 and costs.target_step_seconds > 0
    assert sorted(costs.drafter_cost) == [1, 2, 3, 4] and costs.drafter_cost[1] == 1.0  # u(n)
    assert costs.drafter_cost[3] <= costs.drafter_cost[4]  # the line past u(2)
    assert Costs.from_meta(costs.as_meta()) == costs
    alone = measure_costs(target, None, [1, 2, 3], repeats=1, max_k=2)
    assert alone.c is None and alone.drafter_cost is None


def test_verify_curve_is_a_line_through_the_points_past_one():
    """t(1) keeps its own point (one row may run another kernel); k >= 2 lie on the fitted line."""
    assert fit_verify_curve({1: 1.0, 2: 1.5, 3: 1.4, 4: 1.9}) == pytest.approx({1: 1.0, 2: 1.4, 3: 1.6, 4: 1.8})
    # one noisy point (v(2) = 1.35 measured) moves the line a little: v(2) stays below 1.15
    fitted = fit_verify_curve({1: 0.4, 2: 0.54, 3: 0.40, 4: 0.42, 5: 0.43, 6: 0.44})
    assert fitted[1] == 1.0 and all(fitted[k] <= fitted[k + 1] for k in range(2, 6)) and fitted[2] < 1.15


def test_verify_curve_slope_never_negative():
    fitted = fit_verify_curve({1: 1.0, 2: 2.0, 3: 1.8, 4: 1.6})
    assert fitted[2] == fitted[3] == fitted[4] == pytest.approx(1.8)


def test_cached_costs_round_trip_and_key_mismatch(tmp_path):
    costs = Costs(c=0.21, target_step_seconds=0.3, drafter_step_seconds=0.063, verify_cost={1: 1.0, 2: 1.6}, context_tokens=80, verify_measured={1: 1.0, 2: 1.7})
    save_cached(tmp_path, "pair A float32", costs)
    assert load_cached(tmp_path, "pair A float32") == costs
    assert load_cached(tmp_path, "pair B float32") is None
    assert not list(tmp_path.glob("*.tmp"))


def test_model_free_drafters_pay_no_drafter_cost():
    costs = Costs(c=0.21, target_step_seconds=0.3, drafter_step_seconds=0.063, verify_cost={1: 1.0, 2: 1.6}, context_tokens=80)
    assert for_drafter(costs, "model") == costs
    assert for_drafter(costs, "ngram").c == 0.0 and for_drafter(costs, "prompt-lookup").verify_cost == costs.verify_cost
