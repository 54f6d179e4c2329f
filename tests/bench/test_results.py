"""Reading runs.csv with pandas: typed columns, blanks as NaN, half-written lines dropped, and
the aggregations on the DataFrame (geometric means per group, pooled acceptance, the category
pivot). runs.csv files here are written by append_row, as a sweep writes them."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest

from specbench.bench.results import (
    COLUMNS,
    REQUIRED_COLUMNS,
    ResultsError,
    append_row,
    geometric_mean,
    load_runs,
    read_rows,
    speedup_by_category,
    summarize,
    summary_frame,
)


def run(method="specbench", drafter="model", policy="fixed", gamma=2, prompt_id="a", category="code", **cells) -> dict:
    plain = method == "plain"
    row = {"method": method, "drafter": "" if plain else drafter, "policy": "" if plain else policy,
           "gamma": None if plain else gamma, "temperature": 0.0, "prompt_id": prompt_id, "category": category, "repeat": 0}  # fmt: skip
    return {**row, **cells}


@pytest.fixture
def runs_csv(tmp_path):
    path = tmp_path / "runs.csv"
    for row in (
        run("plain", prompt_id="a", speedup=1.0, tokens_per_second=4.0),
        run(prompt_id="a", drafted=40, accepted=30, acceptance_rate=0.75, speedup=1.6, identical_to_baseline=True),
        run(prompt_id="b", category="prose", drafted=20, accepted=5, acceptance_rate=0.25, speedup=0.9, identical_to_baseline=False),
        run("hf-assisted", policy="hf-defaults", gamma=None, prompt_id="a", speedup=2.0),
        run("hf-assisted", policy="hf-defaults", gamma=None, prompt_id="b", category="prose", speedup=1.5),
    ):
        append_row(path, row)
    return path


def test_load_runs_types_every_column_once(runs_csv):
    """Numbers are float64 (NaN when blank), text stays text ("" when blank), parity is a
    nullable boolean: no caller parses a cell again."""
    runs = load_runs(runs_csv.parent)  # the directory or the file
    assert list(runs.columns) == list(COLUMNS) and len(runs) == 5
    assert runs["gamma"].dtype == "float64" and runs["speedup"].dtype == "float64"
    assert math.isnan(runs.at[0, "gamma"]) and math.isnan(runs.at[3, "drafted"])  # plain, HF: blank
    assert runs.at[1, "drafted"] == 40.0 and runs.at[0, "tokens_per_second"] == 4.0
    assert runs.at[0, "drafter"] == "" and runs.at[1, "category"] == "code"
    assert runs["identical_to_baseline"].dtype == "boolean"
    assert runs["identical_to_baseline"].tolist() == [pd.NA, True, False, pd.NA, pd.NA]
    assert load_runs(runs_csv).equals(runs)


def test_an_older_file_gets_the_newer_columns_blank(tmp_path):
    """A runs.csv begun before predicted_speedup existed still loads, with that column NaN."""
    path = tmp_path / "runs.csv"
    path.write_text(",".join(REQUIRED_COLUMNS) + "\n")
    append_row(path, run(speedup=1.2, predicted_speedup=1.5))
    runs = load_runs(path)
    assert runs.at[0, "speedup"] == 1.2 and math.isnan(runs.at[0, "predicted_speedup"])


def test_half_written_lines_are_dropped(runs_csv):
    """A sweep killed mid-write leaves a short line; resume appends after it. Neither the
    resume (read_rows) nor the summaries (load_runs) may count it as a run."""
    with open(runs_csv, "a") as handle:
        handle.write("specbench,model,fixed,2,0,c,code,0,64")  # no newline: killed here
    append_row(runs_csv, run(prompt_id="d", speedup=1.1))
    with open(runs_csv, "a") as handle:
        handle.write("specbench,model,fi")
    kept = [row["prompt_id"] for row in read_rows(runs_csv)]
    assert kept == ["a", "a", "b", "a", "b", "d"]
    assert load_runs(runs_csv)["prompt_id"].tolist() == kept


def test_a_cell_that_is_not_a_number_names_its_column_and_prompt(runs_csv):
    runs_csv.write_text(runs_csv.read_text().replace("1.6", "fast"))
    with pytest.raises(ResultsError, match=r"column 'speedup' holds 'fast', not a number \(prompt 'a'\)"):
        load_runs(runs_csv)


def test_geometric_mean_over_a_group_leaves_out_blanks():
    """The speedup of a configuration is the geometric mean over its runs with a speedup."""
    assert geometric_mean([1.6, 0.9]) == pytest.approx(math.sqrt(1.6 * 0.9))
    assert geometric_mean(pd.Series([2.0, float("nan"), 8.0, 0.0])) == pytest.approx(4.0)
    assert geometric_mean([None, 0]) is None and geometric_mean([]) is None


def test_summaries_group_by_configuration(runs_csv):
    """One summary per method/drafter/policy/gamma, a blank gamma (HF's defaults) included;
    speedup is the group's geometric mean, acceptance pools the counts; rows from read_rows
    and the DataFrame from load_runs summarise the same."""
    summaries = summarize(load_runs(runs_csv))
    assert [(s.method, s.policy, s.gamma) for s in summaries] == [("hf-assisted", "hf-defaults", None), ("specbench", "fixed", 2), ("plain", "", None)]
    hf, spec, plain = summaries
    assert hf.speedup == pytest.approx(math.sqrt(3.0)) and hf.acceptance_rate is None and hf.runs == 2
    assert spec.speedup == pytest.approx(math.sqrt(1.6 * 0.9))
    assert spec.acceptance_rate == pytest.approx(35 / 60)  # not the mean of 0.75 and 0.25
    assert (spec.differs, spec.checked, plain.checked) == (1, 2, 0)
    assert summarize(read_rows(runs_csv)) == summaries
    assert summary_frame(load_runs(runs_csv))["label"].tolist() == [s.label for s in summaries]


def test_pooled_acceptance_counts_only_runs_whose_acceptance_is_known(tmp_path):
    """A run that does not reveal its acceptance must not dilute the pooled rate with its
    drafted count (nor count as zero accepted)."""
    path = tmp_path / "runs.csv"
    append_row(path, run(drafted=10, accepted=5, acceptance_rate=0.5))
    append_row(path, run(prompt_id="b", drafted=10, accepted=None, acceptance_rate=None))
    assert summarize(load_runs(path))[0].acceptance_rate == pytest.approx(0.5)


def test_category_pivot(runs_csv):
    """One row per configuration (its label with gamma), one column per category, in the order
    the sweep wrote them; each cell the geometric mean over that category's runs."""
    pivot = speedup_by_category(load_runs(runs_csv))
    assert list(pivot.columns) == ["code", "prose"]
    assert list(pivot.index) == ["plain", "specbench / model / fixed, γ=2", "hf-assisted / model / hf-defaults"]
    assert pivot.loc["specbench / model / fixed, γ=2"].tolist() == pytest.approx([1.6, 0.9])
    assert pivot.loc["hf-assisted / model / hf-defaults", "prose"] == pytest.approx(1.5)
    assert math.isnan(pivot.loc["plain", "prose"])  # no plain run of a prose prompt


def test_results_imports_no_pandas():
    """The CLI imports results.py for its schema at start-up; pandas loads on first use, so
    `specbench --help` does not pay for it."""
    code = "import specbench.bench.results, specbench.cli.commands, sys; assert 'pandas' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------- sources, intervals, predictions


def _row(source, prompt, speedup, gamma=2, policy="fixed", forwards=10, category="code", drafted=10, accepted=6):
    return {"source": source, "method": "specbench", "drafter": "model", "policy": policy, "gamma": gamma, "temperature": 0,
            "prompt_id": prompt, "category": category, "repeat": 0, "speedup": speedup, "target_forwards": forwards,
            "drafted": drafted, "accepted": accepted, "acceptance_rate": accepted / drafted}  # fmt: skip


def test_rows_without_a_source_read_as_measured(tmp_path):
    from specbench.bench.results import REQUIRED_COLUMNS, append_row, load_runs, read_rows, row_key, run_key

    path = tmp_path / "runs.csv"
    path.write_text(",".join(REQUIRED_COLUMNS) + "\n", encoding="utf-8")  # a file from before predictions
    append_row(path, {"method": "plain", "temperature": 0, "prompt_id": "p1", "repeat": 0})
    assert load_runs(path)["source"].tolist() == ["measured"]
    assert row_key(read_rows(path)[0]) == run_key("measured", "plain", "", "", None, 0.0, "p1", 0)
    assert run_key("predicted", "plain", "", "", None, 0.0, "p1", 0) != run_key("measured", "plain", "", "", None, 0.0, "p1", 0)


def test_bootstrap_interval_contains_the_estimate_and_narrows_with_prompts():
    from specbench.bench.results import as_runs, summary_frame

    few = [_row("predicted", f"p{i}", s) for i, s in enumerate((1.2, 1.6, 1.4, 1.9))]
    many = [_row("predicted", f"p{i}", s) for i, s in enumerate((1.2, 1.6, 1.4, 1.9) * 8)]
    one = summary_frame(as_runs(few)).iloc[0]
    wide = one["speedup_hi"] - one["speedup_lo"]
    assert one["speedup_lo"] <= one["speedup"] <= one["speedup_hi"]
    narrow = summary_frame(as_runs(many)).iloc[0]
    assert narrow["speedup_hi"] - narrow["speedup_lo"] < wide
    assert summary_frame(as_runs(few)).iloc[0]["speedup_lo"] == one["speedup_lo"]  # reproducible
    single = summary_frame(as_runs(few[:1])).iloc[0]
    assert single["speedup_lo"] != single["speedup_lo"]  # NaN with one prompt


def test_prediction_check_pairs_each_measured_run_with_its_prediction():
    from specbench.bench.results import as_runs, prediction_accuracy, prediction_check

    rows = [_row("predicted", "a", 1.5, forwards=10), _row("measured", "a", 1.2, forwards=10),  # 25% over
            _row("predicted", "b", 1.5, forwards=12), _row("measured", "b", 1.45, forwards=13),  # 3% over, one forward off
            _row("predicted", "c", 1.5)]  # fmt: skip
    check = prediction_check(as_runs(rows))
    assert sorted(check["prompt_id"]) == ["a", "b"]
    assert check.set_index("prompt_id")["forwards_equal"].to_dict() == {"a": True, "b": False}
    assert prediction_accuracy(check) == {"n": 2, "forwards_equal_share": 0.5, "within_10pct_share": 0.5}


def test_oracle_share_and_best_gammas():
    from specbench.bench.results import as_runs, best_gammas, oracle_share, summary_frame

    rows = [_row("predicted", "a", 1.5, gamma=2), _row("predicted", "a", 1.25, gamma=4), _row("predicted", "a", 2.0, gamma=4, policy="oracle")]
    table = summary_frame(as_runs(rows))
    assert best_gammas(table) == {("model", "fixed"): 2}  # the oracle is not a policy to pick
    shares = oracle_share(table).set_index("gamma")["share"].to_dict()
    assert shares == {2: pytest.approx(0.5), 4: pytest.approx(0.25)}


def test_position_acceptance_is_conditional_on_the_earlier_drafts(tmp_path):
    from specbench.bench.results import append_positions, load_positions, position_acceptance

    base = {"source": "predicted", "method": "specbench", "drafter": "model", "policy": "fixed", "gamma": 3, "temperature": 0, "repeat": 0, "category": "code"}
    append_positions(tmp_path / "positions.csv", [{**base, "prompt_id": "a", "position": 1, "reached": 10, "accepted": 8}, {**base, "prompt_id": "a", "position": 2, "reached": 8, "accepted": 4}])
    append_positions(tmp_path / "positions.csv", [{**base, "prompt_id": "b", "position": 1, "reached": 10, "accepted": 2}, {**base, "prompt_id": "b", "position": 2, "reached": 2, "accepted": 2}])
    table = position_acceptance(load_positions(tmp_path)).set_index("position")["acceptance"].to_dict()
    assert table == {1: pytest.approx(0.5), 2: pytest.approx(0.6)}
