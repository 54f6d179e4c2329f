"""`specbench costs` and `specbench predict` on tiny sweeps: re-pricing a sweep with its own
costs gives its predicted rows back, other costs change the price and never the rounds, a
costs file measured with random weights is one predict reads, and bad input is one line."""

from __future__ import annotations

import csv
import json
import shutil
from dataclasses import replace

import pytest
from tiny_hf import char_tokenizer
from transformers import Qwen2Config
from typer.testing import CliRunner

from specbench.bench.meta import costs_meta, read_costs_meta
from specbench.bench.plan import SweepConfig
from specbench.bench.prompts import Prompt
from specbench.bench.reprice import reprice
from specbench.bench.runs_file import read_rows
from specbench.bench.sweep import sweep
from specbench.cli import app
from specbench.errors import ResultsError

pytestmark = pytest.mark.usefixtures("single_thread")

PROMPTS = [Prompt("p-code", "code", ("def add(a, b):",)), Prompt("p-chat", "chat", ("hi!", "and then?"), ("hello.",))]
FAST = dict(
    gammas=(1, 2),
    drafters=("model", "ngram"),
    policies=("fixed", "cost"),
    max_new_tokens=8,
    timing_repeats=1,
    warmup_tokens=2,
    hf_assisted=False,
)
SWEEPS = {
    "greedy": SweepConfig(**FAST),
    "sampled, costs once, 2 repeats": SweepConfig(**FAST, temperature=0.7, repeats=2, costs_per_prompt=False),
}
COUNTS = ("new_tokens", "drafted", "accepted", "acceptance_rate", "mean_accepted_length", "target_forwards", "rounds")


@pytest.fixture(scope="module", params=list(SWEEPS))
def swept(request, close_pair, tmp_path_factory):
    """A finished tiny sweep (predictions and measured runs) of each kind."""
    out = tmp_path_factory.mktemp("sweep") / "results"
    target, drafter = close_pair
    sweep(
        target,
        drafter,
        char_tokenizer(),
        PROMPTS,
        SWEEPS[request.param],
        out,
        target_name="tiny-target",
        drafter_name="tiny-drafter",
        command="test",
    )
    return out


def rows_of(directory, sources=("profile", "predicted")):
    return [row for row in read_rows(directory / "runs.csv") if row["source"] in sources]


def positions_of(directory):
    with open(directory / "positions.csv", newline="") as handle:
        return [row for row in csv.DictReader(handle) if row["source"] == "predicted"]


def test_the_sweeps_own_costs_give_its_predicted_rows_back(swept, tmp_path):
    """Every column of every predicted row, as runs.csv reads back: priced by the same
    functions from the same blocks (meta.json's costs_by_block), no model loaded."""
    result = reprice(swept, tmp_path / "again")
    assert (
        result.rows == len(rows_of(swept, ("predicted",))) > 0 and result.costs_file is None and result.kept_drafts == 0
    )
    assert rows_of(tmp_path / "again") == rows_of(swept)
    assert positions_of(tmp_path / "again") == positions_of(swept)
    meta, again = (json.loads((d / "meta.json").read_text()) for d in (swept, tmp_path / "again"))
    assert again["costs"] == meta["costs"] and again["costs_by_block"] == meta["costs_by_block"]
    assert again["repriced"]["results"] == str(swept) and "checks" not in again
    assert [s for s in again["summary"] if s["source"] == "predicted"] == [
        s for s in meta["summary"] if s["source"] == "predicted"
    ]


def test_other_costs_change_the_price_and_not_the_rounds(swept, tmp_path):
    """A drafter twice as cheap and a flatter verify curve: each model row's speedup rises,
    while what the replay counted (drafts, acceptance, forwards) stays; c is the file's."""
    sweep_costs, _ = read_costs_meta(swept / "meta.json")  # a sweep's meta.json is a costs file
    cheaper = replace(
        sweep_costs,
        c=sweep_costs.c / 2,
        drafter_step_seconds=sweep_costs.drafter_step_seconds / 2,
        verify_cost={k: 1.0 + 0.01 * (k - 1) for k in range(1, 10)},
    )
    costs_file = tmp_path / "costs.json"
    costs_file.write_text(json.dumps(costs_meta(cheaper, {"target": None, "drafter": None}, {}, "test")))
    result = reprice(swept, tmp_path / "cheaper", costs_file)
    before, after = rows_of(swept, ("predicted",)), rows_of(tmp_path / "cheaper", ("predicted",))
    assert [{k: r[k] for k in COUNTS} for r in after] == [{k: r[k] for k in COUNTS} for r in before]
    assert all(float(r["c"]) == pytest.approx(cheaper.c, rel=1e-5) for r in after)
    model = [
        (float(b["speedup"]), float(a["speedup"]))
        for b, a in zip(before, after)
        if b["drafter"] == "model" and int(b["drafted"])
    ]
    assert model and all(a > b for b, a in model)
    assert result.kept_drafts == sum(r["policy"] in ("cost", "oracle") for r in before) > 0
    meta = json.loads((tmp_path / "cheaper" / "meta.json").read_text())
    assert (
        meta["c"] == pytest.approx(cheaper.c)
        and meta["repriced"]["costs"] == str(costs_file)
        and "costs_by_block" not in meta
    )


def test_costs_with_random_weights_write_a_file_predict_reads(swept, tmp_path):
    """`specbench costs --random-weights` on folders that hold only a config (shapes, no
    weights, no tokenizer); `specbench predict --costs` prices the sweep with the file,
    and `specbench plot` charts the result."""
    for name, layers in (("target", 3), ("drafter", 1)):
        config = Qwen2Config(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            tie_word_embeddings=False,
        )
        config.save_pretrained(tmp_path / name)
    costs_file = tmp_path / "costs" / "tiny.json"
    args = [
        "costs",
        "--target",
        str(tmp_path / "target"),
        "--drafter-model",
        str(tmp_path / "drafter"),
        "--random-weights",
        "--dtype",
        "float32",
        "--draft-dtype",
        "float32",
        "--draft-vocab",
        "0",
        "--kernels",
        "default",
        "--timing-repeats",
        "1",
        "--context-tokens",
        "16",
        "--out",
        str(costs_file),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    costs, raw = read_costs_meta(costs_file)
    assert (
        costs.c > 0
        and sorted(costs.verify_cost) == list(range(1, 10))
        and costs.plain_step_seconds
        and costs.loop_seconds is not None
    )
    assert (
        raw["costs_settings"]["random_weights"] is True
        and raw["models"]["target"]["name"] == "target"
        and raw["models"]["drafter"]["dtype"] == "float32"
    )
    assert raw["machine"]["cpu_count"] and raw["versions"]["torch"] and raw["created"]
    out = tmp_path / "priced"
    result = CliRunner().invoke(app, ["predict", str(swept), "--costs", str(costs_file), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (
        f"priced with the costs in {costs_file}" in result.output
        and "keep the drafts the sweep's costs chose" in result.stderr
    )
    assert all(float(r["c"]) == pytest.approx(costs.c, rel=1e-5) for r in rows_of(out, ("predicted",)))
    charts = CliRunner().invoke(app, ["plot", str(out)])
    assert charts.exit_code == 0 and "speedup_vs_gamma.png" in charts.output


def test_a_sweep_of_several_drafter_models_is_priced_with_its_own_costs_only(swept, tmp_path):
    """A costs file holds one pair's costs: it cannot price model@A and model@B alike."""
    several = tmp_path / "several"
    shutil.copytree(swept, several)
    meta = json.loads((several / "meta.json").read_text())
    meta["sweep"]["drafter_models"] = ["a", "b"]
    (several / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ResultsError, match="compares 2 drafter models"):
        reprice(several, tmp_path / "out", several / "meta.json")


@pytest.fixture
def older(swept, tmp_path):
    """The sweep as a version before rounds.jsonl left it."""
    old = tmp_path / "older"
    shutil.copytree(swept, old)
    (old / "rounds.jsonl").unlink()
    return old


@pytest.mark.parametrize(
    "args, message",
    [
        (["predict", "{tmp}/nowhere", "--out", "{tmp}/o"], "no runs.csv in"),
        (["predict", "{swept}", "--costs", "{swept}/runs.csv", "--out", "{tmp}/o"], "is not a costs file"),
        (["predict", "{swept}", "--costs", "{tmp}/empty.json", "--out", "{tmp}/o"], "is not a costs file (no 'costs'"),
        (["predict", "{swept}", "--costs", "{tmp}/missing.json", "--out", "{tmp}/o"], "no costs file"),
        (["predict", "{older}", "--out", "{tmp}/o"], "no rounds.jsonl in"),
        (["predict", "{swept}", "--out", "{swept}"], "already holds results"),
        (["costs", "--drafter-model", "ngram", "--out", "{tmp}/c.json"], "--drafter-model ngram: give a model"),
        (["costs", "--out", "{tmp}"], "is a folder"),
    ],
)
def test_bad_input_is_one_line(swept, older, tmp_path, args, message):
    (tmp_path / "empty.json").write_text("{}")
    names = {"tmp": tmp_path, "swept": swept, "older": older}
    result = CliRunner().invoke(app, [arg.format(**names) for arg in args])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert message in lines[0] and not (tmp_path / "o").exists()
