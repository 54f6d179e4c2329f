"""Charts from a hand-written runs.csv, clear errors for what is not a results directory,
the alpha estimate behind the theory curves, and the promise that plotting needs no torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from specbench.bench.plot import CHARTS, plot_results
from specbench.bench.runs_file import REQUIRED_COLUMNS, as_runs, load_runs, read_rows
from specbench.bench.summary import summarize
from specbench.bench.theory import estimate_alpha
from specbench.cli import app
from specbench.core.stats import expected_tokens_per_round
from specbench.errors import ResultsError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# two prompts in two categories; plain, specbench (model and ngram) and hf-assisted at gamma 1..2
RUNS = """\
method,drafter,policy,gamma,temperature,prompt_id,category,repeat,new_tokens,drafted,accepted,acceptance_rate,mean_accepted_length,target_forwards,tokens_per_second,speedup,c,identical_to_baseline
plain,,,,0,a,code,0,64,,,,1,64,4.0,1,0.3,
specbench,model,fixed,1,0,a,code,0,64,40,32,0.8,1.8,36,5.6,1.4,0.3,true
specbench,model,fixed,2,0,a,code,0,64,56,40,0.714,2.4,28,6.4,1.6,0.3,true
specbench,ngram,fixed,1,0,a,code,0,64,30,15,0.5,1.3,49,4.4,1.1,0.3,true
specbench,ngram,fixed,2,0,a,code,0,64,50,20,0.4,1.5,43,4.8,1.2,0.3,true
hf-assisted,model,fixed,1,0,a,code,0,64,,,,,,5.2,1.3,0.3,true
hf-assisted,model,fixed,2,0,a,code,0,64,,,,,,6.0,1.5,0.3,false
plain,,,,0,b,prose,0,64,,,,1,64,5.0,1,0.3,
specbench,model,fixed,1,0,b,prose,0,64,40,24,0.6,1.6,40,6.0,1.2,0.3,true
specbench,model,fixed,2,0,b,prose,0,64,60,30,0.5,1.9,34,6.5,1.3,0.3,true
specbench,ngram,fixed,1,0,b,prose,0,64,20,6,0.3,1.1,58,4.5,0.9,0.3,true
specbench,ngram,fixed,2,0,b,prose,0,64,30,8,0.27,1.2,53,4.6,0.92,0.3,true
hf-assisted,model,fixed,1,0,b,prose,0,64,,,,,,5.5,1.1,0.3,true
hf-assisted,model,fixed,2,0,b,prose,0,64,,,,,,6.0,1.2,0.3,true
"""


@pytest.fixture
def results_dir(tmp_path):
    directory = tmp_path / "results"
    directory.mkdir()
    (directory / "runs.csv").write_text(RUNS)
    meta = {
        "models": {"target": {"name": "big"}, "drafter": {"name": "small"}},
        "c": 0.3,
        "verify_cost": {str(k): 1 + 0.2 * (k - 1) for k in range(1, 10)},
    }
    (directory / "meta.json").write_text(json.dumps(meta))
    return directory


def test_plot_writes_every_chart_as_png(results_dir):
    paths = plot_results(results_dir)
    assert [p.name for p in paths] == list(CHARTS)
    for path in paths:
        assert path.parent == results_dir and path.read_bytes()[:8] == PNG_MAGIC
        assert path.stat().st_size > 10_000  # something was drawn


def test_model_chart_pairs_each_run_with_its_walltime_model(results_dir):
    """Runs with a predicted_speedup (specbench rows of newer sweeps) become points, labelled by
    configuration and gamma; the others are left out. The chart draws them."""
    from specbench.bench.chart_data import model_points

    lines = RUNS.splitlines()
    rows = [lines[0] + ",predicted_speedup"]
    for line in lines[1:]:
        rows.append(line + (",1.5" if line.startswith("specbench,model,fixed,2") else ","))
    (results_dir / "runs.csv").write_text("\n".join(rows) + "\n")
    points = model_points(load_runs(results_dir))
    assert points == {"specbench / model / fixed, γ=2": [(1.5, 1.6), (1.5, 1.3)]}
    chart = [p for p in plot_results(results_dir) if p.name == "model_vs_measured.png"][0]
    assert chart.stat().st_size > 10_000


def test_plot_without_meta_and_into_another_folder(results_dir, tmp_path):
    """meta.json is optional: without v(k) the prediction assumes v = 1."""
    (results_dir / "meta.json").unlink()
    paths = plot_results(results_dir, tmp_path / "charts")
    assert len(paths) == len(CHARTS) and all(p.parent == tmp_path / "charts" and p.exists() for p in paths)


def test_summary_is_best_first_and_flags_differences(results_dir):
    summaries = summarize(read_rows(results_dir / "runs.csv"))
    speedups = [s.speedup for s in summaries]
    assert speedups == sorted(speedups, reverse=True)
    best = summaries[0]
    assert (best.method, best.drafter, best.gamma) == ("specbench", "model", 2)
    assert best.speedup == pytest.approx((1.6 * 1.3) ** 0.5)
    assert best.acceptance_rate == pytest.approx(70 / 116)  # pooled counts, not a mean of rates
    hf2 = next(s for s in summaries if s.method == "hf-assisted" and s.gamma == 2)
    assert (hf2.differs, hf2.checked, hf2.acceptance_rate) == (1, 2, None)


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.9])
def test_estimate_alpha_recovers_alpha_from_exact_counts(alpha):
    """accepted/drafted underestimates alpha (a rejection ends the round); the fit undoes that."""
    points = []
    for gamma in (1, 3, 5):
        rounds = 100
        accepted = rounds * (expected_tokens_per_round(alpha, gamma) - 1)
        points.append((gamma, rounds * gamma, accepted))
    assert estimate_alpha(points) == pytest.approx(alpha, abs=1e-6)
    assert estimate_alpha([]) is None


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ResultsError, match="no results directory"):
        plot_results(tmp_path / "nope")
    with pytest.raises(ResultsError, match="no runs.csv"):
        plot_results(tmp_path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("method,prompt_id\nplain,a\n", "missing column"),
        (",".join(REQUIRED_COLUMNS) + "\n", "no rows"),
        (RUNS.replace("5.6,1.4", "fast,1.4"), "not a number"),
    ],
)
def test_malformed_csv_is_a_clear_error(tmp_path, text, message):
    (tmp_path / "runs.csv").write_text(text)
    with pytest.raises(ResultsError, match=message):
        plot_results(tmp_path)


def test_malformed_meta_is_a_clear_error(results_dir):
    (results_dir / "meta.json").write_text("{not json")
    with pytest.raises(ResultsError, match="meta.json"):
        plot_results(results_dir)


def test_plot_command(results_dir, tmp_path):
    result = CliRunner().invoke(app, ["plot", str(results_dir)])
    assert result.exit_code == 0 and f"wrote {len(CHARTS)} charts" in result.output
    missing = CliRunner().invoke(app, ["plot", str(tmp_path / "nope")])
    assert (
        missing.exit_code == 2
        and len(missing.output.strip().splitlines()) == 1
        and "no results directory" in missing.output
    )
    (tmp_path / "taken").write_text("not a folder")
    blocked = CliRunner().invoke(app, ["plot", str(results_dir), "--out", str(tmp_path / "taken")])
    assert (
        blocked.exit_code == 2 and len(blocked.output.strip().splitlines()) == 1 and "cannot write to" in blocked.output
    )


def test_plot_command_says_why_there_is_nothing_to_chart(tmp_path):
    """A sweep interrupted during its first plain runs has no chart to draw: one line says so."""
    from specbench.bench.runs_file import append_row

    append_row(
        tmp_path / "runs.csv",
        {
            "source": "profile",
            "method": "plain",
            "temperature": 0,
            "prompt_id": "a",
            "category": "code",
            "repeat": 0,
            "speedup": 1.0,
            "tokens_per_second": 2.0,
        },
    )
    result = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert (
        result.exit_code == 2 and len(result.output.strip().splitlines()) == 1 and "nothing to chart" in result.output
    )


def test_plot_imports_no_torch():
    """Charts must work where torch is absent or slow to import."""
    code = (
        "import specbench.bench.plot, specbench.bench.runs_file, specbench.bench.summary, specbench.bench.prompts, sys;"
        " assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_sweep_summary_table_fits_80_columns_and_flags_differences():
    """The end-of-sweep table is read in a terminal: nothing may be cut to "…" at 80 columns."""
    import io

    from rich.console import Console

    from specbench.bench.summary import Summary
    from specbench.cli.report import summary_table

    summaries = [
        Summary(
            "measured", "hf-assisted", "model", "hf-defaults", None, 8, 0.6, 8.28, 4.76, 2.06, None, 0, 8, 1.71, 2.43
        ),
        Summary("measured", "specbench", "prompt-lookup", "confidence-stop", 12, 8, 0.81, 6.35, 4.25, 1.86, 1.93, 1, 8),
        Summary("measured", "plain", "", "", None, 8, None, 1.0, 2.24, 1.0, None, 0, 0),
        Summary("measured", "specbench", f"model@{LONG_MODEL}", "fixed", 3, 8, 0.7, 3.1, 4.0, 1.1, 1.0, 0, 8),
    ]
    out = io.StringIO()
    Console(file=out, width=80, no_color=True).print(summary_table(summaries, greedy=True))
    text = out.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    assert f"model@{LONG_MODEL}" in _column_text(text)  # folded over lines, never cut
    assert all(word in text for word in ("hf-assisted", "defaults", "prompt-lookup", "confidence-stop"))  # may wrap
    assert "8.28" in text and "6.35" in text and "2.06×" in text and "1.86×" in text  # numbers are never cut
    assert "DIFFERS 1/8" in text and "baseline" in text
    assert "1.71–2.43" in text  # the bootstrap interval of the speedup


LONG_MODEL = "SmolLM2-135M-Instruct.Q4_1-with-a-name-longer-than-any-column"


def _column_text(table_text: str) -> str:
    """The first column's cells of a rendered table, each cell's lines joined."""
    return "".join(line.split("│")[1].strip() if line.count("│") > 2 else "\n" for line in table_text.splitlines())


def test_predicted_table_folds_a_long_drafter_model_name():
    import io

    import pandas as pd
    from rich.console import Console

    from specbench.cli.report import predicted_table

    frame = pd.DataFrame(
        [
            {
                "drafter": f"model@{LONG_MODEL}",
                "policy": "oracle",
                "gamma": 3,
                "acceptance_rate": 1.0,
                "mean_accepted_length": 3.1,
                "speedup": 1.16,
                "speedup_lo": 1.11,
                "speedup_hi": 1.21,
            }
        ]
    )
    shares = pd.DataFrame(columns=["drafter", "policy", "gamma", "share"])
    out = io.StringIO()
    Console(file=out, width=80, no_color=True).print(predicted_table(frame, shares))
    text = out.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    assert f"model@{LONG_MODEL}" in _column_text(text)


def test_predicted_table_gives_no_share_of_the_oracle_to_a_policy_slower_than_plain():
    """(speedup - 1) / (oracle - 1) below 0 is not a size: a slower-than-plain policy reads
    "< 0%", whatever the oracle gained."""
    import io

    import pandas as pd
    from rich.console import Console

    from specbench.cli.report import predicted_table

    rows = [("fixed", 2, 0.90, -5.0), ("cost", 3, 1.02, 0.4)]
    frame = pd.DataFrame(
        [
            {
                "drafter": "model",
                "policy": p,
                "gamma": g,
                "acceptance_rate": 0.5,
                "mean_accepted_length": 1.5,
                "speedup": s,
                "speedup_lo": s,
                "speedup_hi": s,
            }
            for p, g, s, _ in rows
        ]
    )
    shares = pd.DataFrame([{"drafter": "model", "policy": p, "gamma": g, "share": share} for p, g, _, share in rows])
    out = io.StringIO()
    Console(file=out, width=100, no_color=True).print(predicted_table(frame, shares))
    lines = out.getvalue().splitlines()
    assert next(line for line in lines if "model fixed" in line).rstrip("│ ").endswith("< 0%")
    assert next(line for line in lines if "model cost" in line).rstrip("│ ").endswith("40%")


def test_chart_footer_gives_the_c_the_sweep_priced_with():
    """The footer gives the c a sweep priced with: its one measurement, the median of its
    prompts' measurements with their range (the first drafter model's, as meta's c is), or,
    for a sweep written before pricing was pooled, the range of the per-prompt c it used."""
    from specbench.bench.plot import describe

    rows = as_runs([{"temperature": "0.0", "prompt_id": "a"}, {"temperature": "0.0", "prompt_id": "b"}])
    blocks = {"a/0": {"c": 0.22}, "b/0": {"c": 0.26}, "a/1": {"c": 0.19}}
    assert describe({"c": 0.22}, rows).endswith("c = 0.220")
    assert describe({"c": 0.22, "costs_by_block": blocks}, rows).endswith("c = 0.190 to 0.260 (per prompt)")
    assert describe({"c": 0.22, "costs_pooled": 3, "costs_by_block": blocks}, rows).endswith(
        "c = 0.220 (median of 3 measurements, 0.190 to 0.260)"
    )
    two_models = {"a/0@small": {"c": 0.2}, "a/0@big": {"c": 0.9}, "b/0@small": {"c": 0.3}, "b/0@big": {"c": 0.8}}
    assert describe({"c": 0.25, "costs_pooled": 2, "costs_by_block": two_models}, rows).endswith(
        "c of small = 0.250 (median of 2 measurements, 0.200 to 0.300)"
    )
    models = {
        "target": {"name": "T"},
        "drafter": {"name": "A"},
        "drafters": {"a": {"name": "A"}, "b": {"name": "B.gguf"}},
    }
    assert describe({"models": models}, rows).startswith(
        "target T · drafters A, B.gguf · "
    )  # a sweep of two drafter models


def _predicted_sweep(directory, positions=True):
    """A sweep with predictions as the sweep writes it: per prompt (3, two categories) a
    profile plain run, predicted rows of two drafters x gamma 1..3 and their oracles, and the
    measured runs at gamma 2 beside a measured plain run and HF's defaults."""
    from specbench.bench.positions import append_positions
    from specbench.bench.runs_file import append_row

    path = directory / "runs.csv"
    for prompt, category in (("a", "code"), ("b", "code"), ("c", "math")):
        common = {"temperature": 0, "prompt_id": prompt, "category": category, "repeat": 0}
        for source in ("profile", "measured"):
            append_row(
                path,
                {
                    **common,
                    "source": source,
                    "method": "plain",
                    "speedup": 1.0,
                    "tokens_per_second": 2.0,
                    "target_forwards": 10,
                },
            )
        append_row(
            path,
            {
                **common,
                "source": "measured",
                "method": "hf-assisted",
                "drafter": "model",
                "policy": "hf-defaults",
                "speedup": 1.3,
                "tokens_per_second": 2.6,
            },
        )
        for d, drafter in enumerate(("model", "ngram")):
            for gamma, speedup in ((1, 1.2), (2, 1.5), (3, 1.4)):
                row = {
                    **common,
                    "method": "specbench",
                    "drafter": drafter,
                    "policy": "fixed",
                    "gamma": gamma,
                    "drafted": 10,
                    "accepted": 6 - d,
                    "acceptance_rate": (6 - d) / 10,
                    "mean_accepted_length": 2.0 - d / 4,
                    "target_forwards": 6,
                    "speedup": speedup - d / 10,
                }
                append_row(path, {**row, "source": "predicted", "predicted_speedup": row["speedup"]})
                if positions:
                    append_positions(
                        directory / "positions.csv",
                        [
                            {**row, "source": "predicted", "position": i, "reached": 4 - i, "accepted": 3 - i - d / 2}
                            for i in (1, 2)
                        ],
                    )
                if gamma == 2:
                    append_row(
                        path,
                        {
                            **row,
                            "source": "measured",
                            "speedup": row["speedup"] * 0.9,
                            "predicted_speedup": row["speedup"],
                        },
                    )
            append_row(
                path,
                {
                    **common,
                    "source": "predicted",
                    "method": "specbench",
                    "drafter": drafter,
                    "policy": "oracle",
                    "gamma": 3,
                    "speedup": 2.0 - d / 2,
                },
            )


def test_prediction_charts_from_predicted_and_measured_rows(tmp_path):
    """A sweep with predictions gets the gamma curves (predicted lines, measured points), the
    per-position charts and the category chart, and the measured charts that no prediction
    chart replaces: every one a drawn PNG."""
    from specbench.bench.charts_predicted import PREDICTION_CHARTS
    from specbench.bench.plot import SUPERSEDED
    from specbench.bench.runs_file import load_runs
    from specbench.bench.summary import best_gammas, summary_frame

    _predicted_sweep(tmp_path)
    assert best_gammas(summary_frame(load_runs(tmp_path))) == {("model", "fixed"): 2, ("ngram", "fixed"): 2}
    written = [p.name for p in plot_results(tmp_path)]
    assert sorted(written) == sorted([*(c for c in CHARTS if c not in SUPERSEDED), *PREDICTION_CHARTS])
    assert "speedup_by_category.png" in written and "speedup.png" not in written
    for name in written:
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC and (tmp_path / name).stat().st_size > 10_000


def test_category_chart_keeps_the_fastest_configurations_and_says_so(tmp_path, monkeypatch):
    """Past MAX_CATEGORY_SERIES configurations the category chart draws the fastest ones,
    and its title says how many it left out; at or under the cap it says nothing."""
    from specbench.bench import chart_data
    from specbench.bench.runs_file import load_runs
    from specbench.bench.summary import summary_frame

    _predicted_sweep(tmp_path)
    table = summary_frame(load_runs(tmp_path))
    assert chart_data.category_series(table) == ([(("model", "fixed"), 2), (("ngram", "fixed"), 2)], "")
    monkeypatch.setattr(chart_data, "MAX_CATEGORY_SERIES", 1)
    assert chart_data.category_series(table) == ([(("model", "fixed"), 2)], "\n(the 1 fastest of 2 configurations)")
    measured = summary_frame(
        load_runs(tmp_path).query("source == 'measured'")
    )  # the measured chart's bars: the same cap, the same words
    bars, note = chart_data.category_bars(load_runs(tmp_path).query("source == 'measured'"), measured)
    assert len(bars) == 1 and note == "\n(the 1 fastest of 3 configurations)"  # model, ngram and HF's defaults


def test_prediction_charts_without_positions(tmp_path):
    """No positions.csv: no position charts, the others still drawn."""
    from specbench.bench.charts_predicted import PREDICTION_CHARTS
    from specbench.bench.plot import POSITION_CHARTS

    _predicted_sweep(tmp_path, positions=False)
    written = {p.name for p in plot_results(tmp_path)}
    assert set(PREDICTION_CHARTS) - written == set(POSITION_CHARTS)
    assert not any((tmp_path / name).exists() for name in POSITION_CHARTS)


def test_measured_charts_read_measured_rows_only(tmp_path, monkeypatch):
    """Predicted (and profile) rows never join a measured curve."""
    from specbench.bench import plot

    seen = []

    def record(table, runs, meta, path, subtitle):
        seen.append((set(table["source"]), set(runs["source"])))
        path.write_bytes(PNG_MAGIC)
        return path

    monkeypatch.setattr(plot, "DRAWERS", (record,) * len(CHARTS))
    _predicted_sweep(tmp_path)
    plot_results(tmp_path)
    assert seen and all(sources == ({"measured"}, {"measured"}) for sources in seen)


def test_position_rows_pick_each_drafters_fixed_policy_at_its_largest_gamma():
    """Fixed policy first, then another policy, the oracle last; one gamma per drafter."""
    import pandas as pd

    from specbench.bench.chart_data import position_rows

    positions = pd.DataFrame(
        [
            ("model", "fixed", 2.0),
            ("model", "fixed", 4.0),
            ("model", "cost", 8.0),
            ("model", "oracle", 12.0),
            ("ngram", "cost", 3.0),
            ("ngram", "oracle", 12.0),
            ("lookup", "oracle", 6.0),
            ("lookup", "oracle", 12.0),
        ],
        columns=["drafter", "policy", "gamma"],
    )
    chosen = position_rows(positions)
    assert sorted(map(tuple, chosen[["drafter", "policy", "gamma"]].to_numpy().tolist())) == [
        ("lookup", "oracle", 12.0),
        ("model", "fixed", 4.0),
        ("ngram", "cost", 3.0),
    ]
    assert position_rows(positions.iloc[0:0]).empty


def test_hf_lines_say_what_ran_once_and_in_words():
    from specbench.bench.charts_predicted import hf_line_label

    assert hf_line_label("hf-assisted", "model", "hf-defaults") == "hf-assisted, its defaults"
    assert hf_line_label("hf-prompt-lookup", "prompt-lookup", "hf-defaults") == "hf-prompt-lookup, its defaults"
    assert (
        hf_line_label("hf-assisted", "model@small", "hf-defaults-stock-kernels")
        == "hf-assisted model@small, its defaults, PyTorch's kernels"
    )


def test_a_long_subtitle_breaks_between_its_parts():
    from specbench.bench.chart_figure import footer_lines

    parts = [
        "target Qwen2.5-Coder-1.5B-Instruct",
        "drafter Qwen2.5-Coder-0.5B-Instruct",
        "temperature 0.7",
        "8 prompts",
        "c = 0.344 (median of 80 measurements, 0.323 to 0.373)",
    ]
    lines = footer_lines(" · ".join(parts), width=80)
    assert lines == [" · ".join(parts[:2]), " · ".join(parts[2:4]), parts[4]]
    assert footer_lines("short · enough") == ["short · enough"]


def test_dollar_signs_in_names_are_text_and_one_gamma_draws_its_point(tmp_path, monkeypatch):
    """matplotlib reads "$...$" as math: a category "bad $\\frac{$ x" stopped `plot` with a
    ValueError, and "cost $5 to $10" drew in italics. A sweep of one gamma draws its
    predicted value as a point (a line through one point draws nothing)."""
    import matplotlib.axes

    from specbench.bench.runs_file import append_row

    path = tmp_path / "runs.csv"
    for prompt, category in (("a", "bad $\\frac{$ x"), ("b", "cost $5 to $10")):
        common = {
            "temperature": 0,
            "prompt_id": prompt,
            "category": category,
            "repeat": 0,
            "method": "specbench",
            "drafter": "model",
            "policy": "fixed",
            "gamma": 2,
        }
        append_row(
            path,
            {
                **common,
                "method": "plain",
                "drafter": "",
                "policy": "",
                "gamma": "",
                "source": "profile",
                "speedup": 1.0,
                "tokens_per_second": 2.0,
            },
        )
        append_row(
            path,
            {
                **common,
                "source": "predicted",
                "drafted": 10,
                "accepted": 6,
                "acceptance_rate": 0.6,
                "mean_accepted_length": 2.0,
                "speedup": 1.2,
                "predicted_speedup": 1.2,
            },
        )
    markers = []
    plot_line = matplotlib.axes.Axes.plot
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "plot",
        lambda self, *a, **kw: markers.append(kw.get("marker")) or plot_line(self, *a, **kw),
    )
    written = plot_results(tmp_path)
    assert written and all(p.read_bytes()[:8] == PNG_MAGIC for p in written)
    assert "D" in markers
