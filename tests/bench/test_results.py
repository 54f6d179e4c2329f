"""Reading runs.csv with pandas: typed columns, blanks as NaN, half-written lines dropped, and
the aggregations on the DataFrame (geometric means per group, pooled acceptance, the category
pivot). runs.csv files here are written by append_row, as a sweep writes them."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from specbench.bench.runs_file import COLUMNS, REQUIRED_COLUMNS, append_row, load_runs, read_rows
from specbench.bench.summary import geometric_mean, speedup_by_category, summarize, summary_frame
from specbench.errors import ResultsError


def run(method="specbench", drafter="model", policy="fixed", gamma=2, prompt_id="a", category="code", **cells) -> dict:
    plain = method == "plain"
    row = {
        "method": method,
        "drafter": "" if plain else drafter,
        "policy": "" if plain else policy,
        "gamma": None if plain else gamma,
        "temperature": 0.0,
        "prompt_id": prompt_id,
        "category": category,
        "repeat": 0,
    }
    return {**row, **cells}


@pytest.fixture
def runs_csv(tmp_path):
    path = tmp_path / "runs.csv"
    for row in (
        run("plain", prompt_id="a", speedup=1.0, tokens_per_second=4.0),
        run(prompt_id="a", drafted=40, accepted=30, acceptance_rate=0.75, speedup=1.6, identical_to_baseline=True),
        run(
            prompt_id="b",
            category="prose",
            drafted=20,
            accepted=5,
            acceptance_rate=0.25,
            speedup=0.9,
            identical_to_baseline=False,
        ),
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
    assert [(s.method, s.policy, s.gamma) for s in summaries] == [
        ("hf-assisted", "hf-defaults", None),
        ("specbench", "fixed", 2),
        ("plain", "", None),
    ]
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
    """The CLI imports the results modules for their schema at start-up; pandas loads on first
    use, so `specbench --help` does not pay for it."""
    code = (
        "import specbench.bench.runs_file, specbench.bench.summary, specbench.bench.accuracy,"
        " specbench.bench.labels, specbench.bench.positions, specbench.bench.meta_file, specbench.cli, sys;"
        " assert 'pandas' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------- sources, intervals, predictions


def _row(source, prompt, speedup, gamma=2, policy="fixed", forwards=10, category="code", drafted=10, accepted=6):
    return {
        "source": source,
        "method": "specbench",
        "drafter": "model",
        "policy": policy,
        "gamma": gamma,
        "temperature": 0,
        "prompt_id": prompt,
        "category": category,
        "repeat": 0,
        "speedup": speedup,
        "target_forwards": forwards,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": accepted / drafted,
    }


def _plain(source, prompt, tps):
    return {
        **_row(source, prompt, 1.0),
        "method": "plain",
        "drafter": "",
        "policy": "",
        "gamma": "",
        "tokens_per_second": tps,
    }


def test_rows_without_a_source_read_as_measured(tmp_path):
    from specbench.bench.runs_file import REQUIRED_COLUMNS, append_row, load_runs, read_rows, row_key, run_key

    path = tmp_path / "runs.csv"
    path.write_text(",".join(REQUIRED_COLUMNS) + "\n", encoding="utf-8")  # a file from before predictions
    append_row(path, {"method": "plain", "temperature": 0, "prompt_id": "p1", "repeat": 0})
    assert load_runs(path)["source"].tolist() == ["measured"]
    assert read_rows(path)[0]["source"] == "measured"
    assert row_key(read_rows(path)[0]) == run_key("measured", "plain", "", "", None, 0.0, "p1", 0)
    assert run_key("predicted", "plain", "", "", None, 0.0, "p1", 0) != run_key(
        "measured", "plain", "", "", None, 0.0, "p1", 0
    )


def test_a_resumed_sweep_finds_its_rows_by_source(tmp_path):
    """row_key of a row read back equals run_key of its plan, source first; a blank source
    cell is measured; predicted and measured runs of one configuration are different runs."""
    from specbench.bench.runs_file import append_row, read_rows, row_key, run_key

    path = tmp_path / "runs.csv"
    append_row(
        path,
        {**_row("predicted", "p1", 1.4, gamma=3), "temperature": 0.7, "repeat": 1, "drafted": 2.5, "accepted": 1.25},
    )
    append_row(path, {**_row("", "p1", 1.2, gamma=3), "temperature": 0.7, "repeat": 1})
    keys = [row_key(row) for row in read_rows(path)]
    assert keys == [
        run_key("predicted", "specbench", "model", "fixed", 3, 0.7, "p1", 1),
        run_key("measured", "specbench", "model", "fixed", 3.0, "0.7", "p1", "1"),
    ]
    assert keys[0] != keys[1]


def test_predicted_rows_may_not_go_into_a_file_without_a_source_column(tmp_path):
    """They would read back as measured; measured rows still resume an old file."""
    from specbench.bench.runs_file import REQUIRED_COLUMNS, append_row, load_runs

    path = tmp_path / "runs.csv"
    path.write_text(",".join(REQUIRED_COLUMNS) + "\n", encoding="utf-8")
    append_row(path, _row("measured", "a", 1.2))
    with pytest.raises(ResultsError, match="before predictions"):
        append_row(path, _row("predicted", "a", 1.5))
    assert load_runs(path)["source"].tolist() == ["measured"]


def test_bootstrap_interval_contains_the_estimate_and_narrows_with_prompts():
    from specbench.bench.runs_file import as_runs
    from specbench.bench.summary import summary_frame

    few = [_row("predicted", f"p{i}", s) for i, s in enumerate((1.2, 1.6, 1.4, 1.9))]
    many = [_row("predicted", f"p{i}", s) for i, s in enumerate((1.2, 1.6, 1.4, 1.9) * 8)]
    one = summary_frame(as_runs(few)).iloc[0]
    wide = one["speedup_hi"] - one["speedup_lo"]
    assert one["speedup_lo"] <= one["speedup"] <= one["speedup_hi"] and wide > 0
    narrow = summary_frame(as_runs(many)).iloc[0]
    assert narrow["speedup_hi"] - narrow["speedup_lo"] < wide
    assert summary_frame(as_runs(few)).iloc[0]["speedup_lo"] == one["speedup_lo"]  # reproducible
    single = summary_frame(as_runs(few[:1])).iloc[0]
    assert math.isnan(single["speedup_lo"]) and math.isnan(single["acceptance_hi"])  # NaN with one prompt


def test_bootstrap_interval_of_pooled_acceptance():
    """The acceptance interval brackets the pooled (token-weighted) rate, not the mean of rates."""
    from specbench.bench.runs_file import as_runs
    from specbench.bench.summary import summary_frame

    rows = [
        _row("predicted", f"p{i}", 1.5, drafted=d, accepted=a)
        for i, (d, a) in enumerate(((100, 90), (10, 1), (100, 80), (10, 2), (50, 40)))
    ]
    row = summary_frame(as_runs(rows)).iloc[0]
    assert row["acceptance_rate"] == pytest.approx(213 / 270)
    assert row["acceptance_lo"] <= row["acceptance_rate"] <= row["acceptance_hi"] < 0.95 and row["acceptance_lo"] > 0.5


def test_bootstrap_resamples_prompts_and_their_repeats_together():
    """Each prompt's repeats give 1x and 4x: any resample of whole prompts has geometric mean 2,
    so the interval is a point; resampling rows one by one would spread it."""
    from specbench.bench.bootstrap import bootstrap_interval

    frame = pd.DataFrame({"prompt_id": ["a", "a", "b", "b"], "log": [0.0, math.log(4)] * 2, "n": [1.0] * 4})
    lo, hi = bootstrap_interval(frame, lambda sums: np.exp(sums["log"] / sums["n"]))
    assert lo == pytest.approx(2.0) and hi == pytest.approx(2.0)
    spread = bootstrap_interval(
        frame.assign(prompt_id=["a", "b", "c", "d"]), lambda sums: np.exp(sums["log"] / sums["n"])
    )
    assert spread[0] < 1.9 and spread[1] > 2.1
    assert all(math.isnan(v) for v in bootstrap_interval(frame.iloc[:2], lambda sums: sums["n"]))  # one prompt


def test_a_groups_interval_does_not_depend_on_the_other_groups():
    """The sweep's table (every group) and a chart's (measured groups only) agree."""
    from specbench.bench.bootstrap import INTERVAL_COLUMNS
    from specbench.bench.runs_file import as_runs
    from specbench.bench.summary import summary_frame

    measured = [_row("measured", f"p{i}", s) for i, s in enumerate((1.1, 1.3, 1.7))]
    predicted = [_row("predicted", f"p{i}", s, gamma=4) for i, s in enumerate((1.2, 1.6, 1.4, 1.9))]
    alone = summary_frame(as_runs(measured)).iloc[0][INTERVAL_COLUMNS]
    together = summary_frame(as_runs(predicted + measured)).set_index("source").loc["measured", INTERVAL_COLUMNS]
    assert alone.tolist() == together.tolist() and not alone.isna().any()


def test_prediction_check_pairs_each_measured_run_with_its_prediction():
    from specbench.bench.accuracy import CHECK_COLUMNS, prediction_accuracy, prediction_check
    from specbench.bench.runs_file import as_runs

    rows = [
        _row("predicted", "a", 1.5, forwards=10),
        _row("measured", "a", 1.2, forwards=10),  # 25% over
        _row("predicted", "b", 1.5, forwards=12),
        _row("measured", "b", 1.45, forwards=13),  # 3% over, one forward off
        _row("predicted", "c", 1.5),  # not measured
        _row("measured", "c", 1.5, gamma=3),  # measured at a gamma not predicted
        {**_row("measured", "a", 1.0), "method": "hf-assisted"},
    ]
    check = prediction_check(as_runs(rows))
    assert list(check.columns) == CHECK_COLUMNS
    assert sorted(check["prompt_id"]) == ["a", "b"]
    by_prompt = check.set_index("prompt_id")
    assert by_prompt["forwards_equal"].to_dict() == {"a": True, "b": False}
    assert by_prompt.loc["a", "speedup_error"] == pytest.approx(0.25) and by_prompt.loc["b", "measured_forwards"] == 13
    # one configuration: geometric means 1.5 predicted, sqrt(1.2 * 1.45) = 1.319 measured, 13.7% over
    accuracy = prediction_accuracy(check)
    assert accuracy.pop("median_error") == pytest.approx((0.25 + 1.5 / 1.45 - 1) / 2)  # the median of two
    assert accuracy == {
        "n": 2,
        "forwards_equal_share": 0.5,
        "within_10pct_share": 0.5,
        "points": 2,
        "repeats_per_point": 1,
        "points_within_10pct_share": 0.5,
        "configurations": 1,
        "configurations_within_10pct_share": 0.0,
    }
    check.loc[check["prompt_id"] == "a", "measured_speedup"] = 1.45  # both 3% over
    assert prediction_accuracy(check)["configurations_within_10pct_share"] == 1.0
    assert prediction_accuracy(prediction_check(as_runs(rows[4:])))["n"] == 0


def test_a_point_with_repeats_is_judged_on_their_means():
    """Two repeats of prompt a, 25% over and 12% under: each run misses by more than 10%,
    their geometric means (1.5 against sqrt(1.2 * 1.7) = 1.428) are 5% apart; prompt b's one
    run, 20% over, stays a miss."""
    from specbench.bench.accuracy import prediction_accuracy, prediction_check
    from specbench.bench.runs_file import as_runs

    rows = [{**_row("predicted", "a", 1.5), "repeat": r} for r in (0, 1)]
    rows += [{**_row("measured", "a", s), "repeat": r} for r, s in ((0, 1.2), (1, 1.7))]
    rows += [_row("predicted", "b", 1.2), _row("measured", "b", 1.0)]
    accuracy = prediction_accuracy(prediction_check(as_runs(rows)))
    assert (accuracy["n"], accuracy["within_10pct_share"]) == (3, 0.0)
    assert (accuracy["points"], accuracy["repeats_per_point"], accuracy["points_within_10pct_share"]) == (2, 2, 0.5)


def test_prediction_check_under_sampling_compares_expectations():
    """Sampled predictions are expectations: 12.4 forwards predicted, 12 measured is equal."""
    from specbench.bench.accuracy import prediction_check
    from specbench.bench.runs_file import as_runs

    rows = [
        {**_row("predicted", "a", 1.5, forwards=12.4), "temperature": 0.7},
        {**_row("measured", "a", 1.5, forwards=12), "temperature": 0.7},
        {**_row("predicted", "b", 1.5, forwards=12.6), "temperature": 0.7},
        {**_row("measured", "b", 1.5, forwards=12), "temperature": 0.7},
    ]
    assert prediction_check(as_runs(rows)).set_index("prompt_id")["forwards_equal"].to_dict() == {"a": True, "b": False}


def test_plain_repeatability_compares_each_prompts_two_plain_timings():
    """Phase 1's plain run against the one beside the measured runs: a 5% and a 25% gap."""
    from specbench.bench.accuracy import plain_repeatability
    from specbench.bench.runs_file import as_runs

    rows = [
        _plain("profile", "a", 10.0),
        _plain("measured", "a", 10.5),
        _plain("profile", "b", 10.0),
        _plain("measured", "b", 7.5),
        _plain("profile", "c", 10.0),
        _row("measured", "a", 1.2),
    ]  # c was not measured; specbench rows are left out
    assert plain_repeatability(as_runs(rows)) == pytest.approx(
        {"n": 2, "within_10pct_share": 0.5, "median_difference": 0.15}
    )
    assert plain_repeatability(as_runs(rows[4:]))["n"] == 0


def test_price_check_reads_each_part_of_a_measured_run_against_its_price(tmp_path):
    """A run whose prediction made its rounds: 4 rounds (3 of 2 drafts, 1 of none), 3 one-id
    and 3 two-id drafter forwards. Priced at t(1) 0.1 s, c 0.4, u(2) 1.5, v(3) 1.4 and a loop
    of 1 ms: drafter forwards 0.4 * (3 + 4.5) = 3 steps (0.3 s), verify passes 3 * 1.4 + 1
    = 5.2 steps (0.52 s). Measured: 0.36 s drafting (1.2x), 0.52 s verifying (1x), 8 ms of
    the rest (2 ms a round) and a plain step of 0.1 s against 0.11 priced."""
    from specbench.bench.accuracy import PRICE_COLUMNS, price_accuracy, price_check
    from specbench.bench.costs import Costs
    from specbench.bench.runs_file import append_row, read_rows, row_key
    from specbench.core.stats import RoundCounts

    costs = Costs(
        0.4,
        0.1,
        0.04,
        {1: 1.0, 2: 1.2, 3: 1.4},
        64,
        drafter_cost={1: 1.0, 2: 1.5},
        plain_step_seconds=0.11,
        loop_seconds=0.001,
    )
    timed = {"draft_seconds": 0.36, "verify_seconds": 0.52, "decode_seconds": 0.888}
    rows = [
        _plain("measured", "a", 10.0),
        _row("predicted", "a", 1.5, forwards=5, drafted=6),
        {**_row("measured", "a", 1.3, forwards=5, drafted=6), **timed},
        _plain("measured", "b", 10.0),
        _row("predicted", "b", 1.5, forwards=5, drafted=6),
        {**_row("measured", "b", 1.3, forwards=5, drafted=7), **timed},  # other rounds than predicted
        _row("predicted", "c", 1.5, forwards=5, drafted=6),
        {**_row("measured", "c", 1.3, forwards=5, drafted=6), **timed},  # no measured plain run
    ]
    path = tmp_path / "runs.csv"
    for row in rows:
        append_row(path, row)
    rows = read_rows(path)
    counts = RoundCounts(10, {2: 3, 0: 1}, {1: 3, 2: 3})
    rounds = {row_key(row): counts for row in rows if row["source"] == "predicted"}
    check = price_check(rows, rounds, lambda _row: costs)
    assert list(check.columns) == PRICE_COLUMNS and check["prompt_id"].tolist() == ["a"]
    found = check.iloc[0]
    assert found["plain"] == pytest.approx(0.1 / 0.11)
    assert found["draft"] == pytest.approx(1.2) and found["verify"] == pytest.approx(1.0)
    assert found["loop_ms"] == pytest.approx(2.0) and found["loop_priced_ms"] == pytest.approx(1.0)
    assert price_accuracy(check)["n"] == 1 and price_accuracy(check)["draft"] == pytest.approx(1.2)
    copies = {row_key(row): RoundCounts(10, {2: 3, 0: 1}, {}) for row in rows if row["source"] == "predicted"}
    assert price_check(rows, copies, lambda _row: costs).iloc[0]["draft"] is None  # no drafter forward to price
    assert price_accuracy(price_check(rows, {}, lambda _row: costs)) == {
        "n": 0,
        "plain": None,
        "draft": None,
        "verify": None,
        "loop_ms": None,
        "loop_priced_ms": None,
    }


def test_oracle_share_and_best_gammas():
    from specbench.bench.runs_file import as_runs
    from specbench.bench.summary import best_gammas, oracle_share, summary_frame

    rows = [
        _row("predicted", "a", 1.5, gamma=2),
        _row("predicted", "a", 1.25, gamma=4),
        _row("predicted", "a", 2.0, gamma=4, policy="oracle"),
        _row("measured", "a", 1.4, gamma=2),
    ]
    table = summary_frame(as_runs(rows))
    assert best_gammas(table) == {("model", "fixed"): 2}  # the oracle is not a policy to pick
    assert best_gammas(table, source="measured") == {("model", "fixed"): 2}
    shares = oracle_share(table)
    assert list(shares.columns) == ["source", "drafter", "policy", "gamma", "speedup", "oracle_speedup", "share"]
    assert set(shares["source"]) == {"predicted"}  # no measured oracle to share
    assert shares.set_index("gamma")["share"].to_dict() == {2: pytest.approx(0.5), 4: pytest.approx(0.25)}


def test_oracle_share_is_nan_when_the_oracle_gains_nothing():
    from specbench.bench.runs_file import as_runs
    from specbench.bench.summary import oracle_share, summary_frame

    rows = [_row("predicted", "a", 0.8, gamma=2), _row("predicted", "a", 0.9, gamma=4, policy="oracle")]
    share = oracle_share(summary_frame(as_runs(rows)))["share"]
    assert len(share) == 1 and math.isnan(share.iloc[0])
    assert oracle_share(summary_frame(as_runs(rows[:1]))).empty  # no oracle, no share


def test_a_resume_that_raised_the_largest_gamma_keeps_only_the_new_oracle():
    """The oracle of a sweep resumed with a larger gamma drafts further: its rows up to the
    old gamma stay in runs.csv, but the summary, the shares and the charts read one oracle
    per drafter, the one that bounds every policy now swept."""
    from specbench.bench.runs_file import as_runs
    from specbench.bench.summary import oracle_share, summary_frame

    rows = [
        _row("predicted", "a", 1.5, gamma=2),
        _row("predicted", "a", 1.6, gamma=2, policy="oracle"),
        _row("predicted", "a", 1.7, gamma=3),
        _row("predicted", "a", 2.0, gamma=3, policy="oracle"),
    ]
    table = summary_frame(as_runs(rows))
    oracles = table[table["policy"] == "oracle"]
    assert oracles["gamma"].tolist() == [3] and oracles["speedup"].tolist() == [2.0]
    assert oracle_share(table).set_index("gamma")["share"].to_dict() == {2: pytest.approx(0.5), 3: pytest.approx(0.7)}


def test_speedup_by_category_reads_one_source():
    from specbench.bench.runs_file import as_runs

    rows = [_row("predicted", "a", 1.5), _row("measured", "a", 1.2), _row("predicted", "b", 2.0, category="prose")]
    assert speedup_by_category(as_runs(rows)).to_dict("list") == {"code": [1.2]}
    assert speedup_by_category(as_runs(rows), source="predicted").loc["specbench / model / fixed, γ=2"].tolist() == [
        1.5,
        2.0,
    ]


def test_position_acceptance_is_conditional_on_the_earlier_drafts(tmp_path):
    from specbench.bench.positions import POSITION_COLUMNS, append_positions, load_positions, position_acceptance

    assert (
        list(load_positions(tmp_path).columns) == list(POSITION_COLUMNS) and load_positions(tmp_path).empty
    )  # no file
    base = {
        "source": "predicted",
        "method": "specbench",
        "drafter": "model",
        "policy": "fixed",
        "gamma": 3,
        "temperature": 0,
        "repeat": 0,
        "category": "code",
    }
    append_positions(
        tmp_path / "positions.csv",
        [
            {**base, "prompt_id": "a", "position": 1, "reached": 10, "accepted": 8},
            {**base, "prompt_id": "a", "position": 2, "reached": 8, "accepted": 4},
        ],
    )
    with open(tmp_path / "positions.csv", "a") as handle:
        handle.write("predicted,specbench,model,fixed,3,0,b,code,0,1,10")  # killed mid-write
    append_positions(
        tmp_path / "positions.csv",
        [
            {**base, "prompt_id": "b", "position": 1, "reached": 10, "accepted": 2},
            {**base, "prompt_id": "b", "position": 2, "reached": 2, "accepted": 2},
        ],
    )
    positions = load_positions(tmp_path)
    assert len(positions) == 4 and positions["reached"].dtype == "float64"
    table = position_acceptance(positions)
    assert list(table.columns) == [
        "source",
        "drafter",
        "policy",
        "gamma",
        "position",
        "reached",
        "accepted",
        "acceptance",
    ]
    assert table.set_index("position")["acceptance"].to_dict() == {
        1: pytest.approx(0.5),
        2: pytest.approx(0.6),
    }  # 10/20, 6/10
    by_prompt = position_acceptance(positions, by=("prompt_id",)).set_index(["prompt_id", "position"])["acceptance"]
    assert by_prompt[("a", 2)] == pytest.approx(0.5) and by_prompt[("b", 2)] == pytest.approx(1.0)


def test_position_acceptance_takes_expected_counts(tmp_path):
    """Under sampling, reached and accepted are expectations (fractions)."""
    from specbench.bench.positions import append_positions, load_positions, position_acceptance

    base = {
        "source": "predicted",
        "method": "specbench",
        "drafter": "model",
        "policy": "fixed",
        "gamma": 2,
        "temperature": 0.7,
        "prompt_id": "a",
        "repeat": 0,
        "category": "code",
    }
    append_positions(
        tmp_path / "positions.csv",
        [
            {**base, "position": 1, "reached": 4.0, "accepted": 2.5},
            {**base, "position": 2, "reached": 2.5, "accepted": 0.75},
        ],
    )
    table = position_acceptance(load_positions(tmp_path))
    assert table["acceptance"].tolist() == pytest.approx([0.625, 0.3])


def test_best_gammas_breaks_a_tie_for_the_smallest_gamma_whatever_the_row_order():
    from specbench.bench.runs_file import as_runs
    from specbench.bench.summary import best_gammas, summary_frame

    # a cost policy that never drafts past 3 predicts one run at every cap from 3 up; the
    # geometric means can differ in the last bits with the order they were summed in
    tied = [
        _row("predicted", "a", 1.2295162675030444 + (1e-16 if g == 4 else 0.0), gamma=g, policy="cost")
        for g in (5, 4, 3, 6)
    ]
    rows = [
        _row("predicted", "a", 1.1, gamma=2, policy="cost"),
        *tied,
        _row("predicted", "a", 1.3, gamma=1),
        _row("predicted", "a", 1.3, gamma=2),
    ]
    best = best_gammas(summary_frame(as_runs(rows)))
    assert best == {("model", "fixed"): 1, ("model", "cost"): 3}
    assert list(best) == [("model", "fixed"), ("model", "cost")]  # still fastest first
