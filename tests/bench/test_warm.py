"""What the cost policy keeps between runs: generate's calibration file and a sweep's warm starts."""

from __future__ import annotations

import json

import pytest

from specbench.bench.calibration_cache import FORMAT, read_calibration, write_calibration
from specbench.bench.plan import PlannedRun
from specbench.bench.prompts import Prompt
from specbench.bench.warm import WarmBook
from specbench.errors import CalibrationError
from specbench.policies.calibration import Evidence, keep

KEY = "target|auto|drafter|auto|vocab=0|cpu|default|threads=1|t=0,k=0,p=1|costs.v6"


def rated(tokens: float, cost: float) -> Evidence:
    return Evidence(Evidence.empty().tables, (0.0, 0.0), (tokens, cost))


def test_the_file_keeps_each_drafters_evidence(tmp_path):
    path = tmp_path / "cal.json"
    assert read_calibration(path, KEY, "model+lookup") == (None, None)  # nothing yet: cold, no note
    write_calibration(path, KEY, "model+lookup", rated(3.0, 2.0))
    write_calibration(path, KEY, "model+lookup", rated(1.0, 1.0))
    write_calibration(path, KEY, "model", rated(5.0, 5.0))
    found, note = read_calibration(path, KEY, "model+lookup")
    assert note is None and found == keep(rated(3.0, 2.0), rated(1.0, 1.0))
    assert read_calibration(path, KEY, "model")[0] == rated(5.0, 5.0)
    assert read_calibration(path, KEY, "ngram") == (None, None)


def test_another_pairs_file_is_refused_in_one_line(tmp_path):
    path = tmp_path / "cal.json"
    write_calibration(path, KEY, "model", rated(3.0, 2.0))
    with pytest.raises(CalibrationError, match="another model pair") as caught:
        read_calibration(path, KEY.replace("target", "other"), "model")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "text",
    ["{ cut short", '{"format": 99, "key": "k", "drafters": {}}', "[]", None],
)
def test_a_corrupt_file_is_ignored_and_then_replaced(tmp_path, text):
    path = tmp_path / "cal.json"
    if text is None:  # the file's own layout, one drafter's entry broken
        path.write_text(json.dumps({"key": KEY, "format": FORMAT, "drafters": {"model": {"tables": {}}}}))
    else:
        path.write_text(text)
    found, note = read_calibration(path, KEY, "model")
    assert found is None and "starting cold" in note
    write_calibration(path, KEY, "model", rated(3.0, 2.0))
    assert read_calibration(path, KEY, "model") == (rated(3.0, 2.0), None)


def planned(
    prompt: str, drafter: str = "model+lookup", gamma: int = 12, policy: str = "cost", source: str = "predicted"
):
    return PlannedRun("specbench", drafter, policy, gamma, 0.0, Prompt(prompt, "x", ("?",)), 0, source)


def test_a_sweeps_runs_start_from_the_prompts_before_them():
    """Each prompt's cost-policy runs (predicted or timed) start from the evidence the same
    drafter and gamma gathered on the prompts before it, folded as generate keeps it; never
    from their own prompt's, never from another drafter's or gamma's; other policies start cold."""
    book = WarmBook(["a", "b", "c"])
    assert book.start(planned("a")) is None
    book.add(planned("a"), rated(3.0, 2.0))
    book.add(planned("a", gamma=4), rated(100.0, 1.0))
    book.add(planned("a", drafter="model"), rated(100.0, 1.0))
    book.add(planned("c"), rated(7.0, 7.0))  # a later prompt (a resumed sweep may hold one) is not used for b
    assert book.start(planned("b")) == keep(None, rated(3.0, 2.0))
    assert book.start(planned("b", source="measured")) == book.start(planned("b"))
    book.add(planned("b"), rated(1.0, 1.0))
    assert book.start(planned("c")) == keep(keep(None, rated(3.0, 2.0)), rated(1.0, 1.0))
    assert book.start(planned("c", policy="fixed")) is None
