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
