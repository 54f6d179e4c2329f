"""Sharded sweeps (`sweep --shard I/N`) and `specbench merge` on tiny models: four shards of the
`quick` set, run one after the other and merged, give the unsharded sweep's rows and charts;
merge refuses shards that do not belong together, in one line; a shard interrupted and resumed
loses nothing."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from conftest import noisy_copy, tiny_model
from tiny_hf import char_tokenizer
from typer.testing import CliRunner

from specbench.bench.plan import SweepConfig
from specbench.bench.prompts import load_prompts
from specbench.bench.reprice import CHOOSE_BY_COSTS
from specbench.bench.runs_file import COLUMNS, KEY_COLUMNS, read_rows, row_key
from specbench.bench.shards import Shard, parse_shard, shard_prompt_ids
from specbench.bench.sweep import sweep
from specbench.cli import app
from specbench.errors import SweepError
from specbench.models.loading import LoadedPair
from specbench.models.model import LoadedModel
from specbench.models.specs import ModelSpec

pytestmark = pytest.mark.usefixtures("single_thread")

# what a run's row says that depends on the clock; the rest of its columns must match
CLOCKED = (
    "tokens_per_second",
    "speedup",
    "c",
    "prefill_seconds",
    "decode_seconds",
    "draft_seconds",
    "verify_seconds",
    "predicted_speedup",
)
COUNTED = tuple(column for column in COLUMNS if column not in CLOCKED)
SWEEP = [
    "sweep",
    "--prompts",
    "quick",
    "--gamma",
    "1,3",
    "--drafter",
    "model",
    "--drafter",
    "ngram",
    "--measure",
    "all",
    "--max-new-tokens",
    "6",
    "--timing-repeats",
    "1",
    "--no-hf-assisted",
]


@pytest.fixture(scope="module")
def pair():
    tokenizer = char_tokenizer()
    target = tiny_model(0, vocab=len(tokenizer), max_positions=2048)
    return tokenizer, target, noisy_copy(target, scale=0.2, seed=7)


def invoke(*args) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory, pair):
    """The quick set swept whole, and in four shards one after the other, then merged."""
    monkeypatch = pytest.MonkeyPatch()
    tokenizer, target, drafter = pair

    def load(config, **options):
        loaded_target = LoadedModel(copy.deepcopy(target), tokenizer, ModelSpec("dir", "tiny-target"), "tiny-target")
        loaded = LoadedModel(copy.deepcopy(drafter), tokenizer, ModelSpec("dir", "tiny-drafter"), "tiny-drafter")
        return LoadedPair(loaded_target, loaded, "model", config.draft_vocab)

    monkeypatch.setattr("specbench.cli.sweep.load_pair_with_progress", load)
    root = tmp_path_factory.mktemp("shards")
    invoke(*SWEEP, "--out", root / "whole")
    shards = [root / f"shard-{i}" for i in range(1, 5)]
    for i, out in enumerate(shards, start=1):
        invoke(*SWEEP, "--shard", f"{i}/4", "--out", out)
    monkeypatch.undo()
    output = invoke("merge", root / "merged", *reversed(shards))  # any order
    return root, shards, output


def counted(rows: list[dict]) -> list[tuple]:
    """What the rows say apart from the clock: the oracle drafts as the measured costs make it
    worth (reprice.CHOOSE_BY_COSTS), so of its rows only the key and the output count."""
    return sorted(
        tuple(row.get(c, "") for c in (KEY_COLUMNS + ("output_hash",) if row["policy"] in CHOOSE_BY_COSTS else COUNTED))
        for row in rows
    )


def test_shards_take_every_prompt_once_in_the_selections_order():
    ids = [f"p{i}" for i in range(10)]
    taken = [shard_prompt_ids(ids, Shard(i, 4)) for i in range(1, 5)]
    assert taken[0] == ["p0", "p4", "p8"] and taken[3] == ["p3", "p7"]
    assert sorted(sum(taken, [])) == sorted(ids)
    assert shard_prompt_ids(ids, None) == ids


@pytest.mark.parametrize("text", ["0/4", "5/4", "2", "a/b", "1/0", "-1/2"])
def test_a_bad_shard_is_one_line(text):
    with pytest.raises(SweepError, match="bad --shard"):
        parse_shard(text)


def test_a_shard_cannot_pick_the_best_gamma_alone():
    with pytest.raises(SweepError, match="--shard needs --measure all or a list"):
        SweepConfig(shard=Shard(1, 2))
    assert SweepConfig(shard=Shard(1, 1)).shard == Shard(1, 1)  # one shard sees every prompt


def test_four_shards_merged_are_the_unsharded_sweep(sweeps):
    root, shards, output = sweeps
    whole, merged = read_rows(root / "whole" / "runs.csv"), read_rows(root / "merged" / "runs.csv")
    assert len(merged) == len(whole) > 8 * 4
    assert counted(merged) == counted(whole)
    sizes = [len({r["prompt_id"] for r in read_rows(s / "runs.csv")}) for s in shards]
    assert sizes == [2, 2, 2, 2]  # 8 prompts, round robin
    # merged in the order one sweep writes: phase by phase, then the selection's order
    order = [p.id for p in load_prompts("quick")]
    profile = [r["prompt_id"] for r in merged if r["source"] == "profile"]
    assert profile == order
    assert [r["source"] for r in merged] == sorted(
        (r["source"] for r in merged), key=["profile", "predicted", "measured"].index
    )
    meta = json.loads((root / "merged" / "meta.json").read_text())
    assert [s["shard"] for s in meta["shards"]] == ["1/4", "2/4", "3/4", "4/4"]
    assert meta["sweep"]["shard"] is None and meta["finished"] and not meta["machines_differ"]
    assert len(meta["costs_by_block"]) == 8 and meta["costs_pooled"] == 8
    configurations = [
        sorted((s["source"], s["method"], s["drafter"], s["policy"], s["gamma"], s["runs"]) for s in m["summary"])
        for m in (meta, json.loads((root / "whole" / "meta.json").read_text()))
    ]
    assert configurations[0] == configurations[1]
    for name in ("positions.csv", "paths.jsonl", "rounds.jsonl"):
        lines = (root / "merged" / name).read_text().splitlines()
        assert sorted(lines[1:] if name.endswith(".csv") else lines) == sorted(
            line for s in shards for line in (s / name).read_text().splitlines()[(1 if name.endswith(".csv") else 0) :]
        )
    assert "4 shards" in output and "every shard ran on" in output


def test_merged_charts_and_predictions_are_the_unsharded_ones(sweeps, tmp_path):
    root, _, _ = sweeps
    charts = {}
    for name in ("whole", "merged"):
        invoke("plot", root / name, "--out", tmp_path / f"charts-{name}")
        charts[name] = sorted(p.name for p in (tmp_path / f"charts-{name}").iterdir())
    assert charts["merged"] == charts["whole"] and len(charts["whole"]) >= 4
    # priced with one machine's costs, the predicted rows are the same to the last digit (but the
    # oracle's, which keeps the drafts its shard's own measured costs chose)
    costs = root / "whole" / "meta.json"
    for name in ("whole", "merged"):
        invoke("predict", root / name, "--costs", costs, "--out", tmp_path / f"priced-{name}")
    priced = {
        name: {
            row_key(r): {k: v for k, v in r.items() if k != "tokens_per_second"}
            for r in read_rows(tmp_path / f"priced-{name}" / "runs.csv")
            if r["source"] == "predicted" and r["policy"] not in CHOOSE_BY_COSTS
        }
        for name in ("whole", "merged")
    }
    assert priced["merged"] == priced["whole"] and len(priced["whole"]) == 8 * 2 * 2


def edited(src, dest, change) -> object:
    shutil.copytree(src, dest)
    meta = json.loads((dest / "meta.json").read_text())
    change(meta)
    (dest / "meta.json").write_text(json.dumps(meta))
    return dest


def refusal(*args) -> str:
    result = CliRunner().invoke(app, ["merge", *[str(a) for a in args]])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) <= 2, result.output  # one line (rich may fold it)
    return " ".join(result.output.split())


def test_merge_refuses_shards_that_do_not_belong_together(sweeps, tmp_path):
    _, shards, _ = sweeps
    s1, s2, s3, s4 = shards
    out = tmp_path / "out"
    assert "missing shard(s) 4/4" in refusal(out, s1, s2, s3)
    assert "shard 2/4 is given twice" in refusal(out, s1, s2, s2, s3, s4)

    def other_gammas(meta):
        meta["sweep"]["gammas"] = [1, 2]

    assert "differ in sweep.gammas" in refusal(out, s1, s2, edited(s3, tmp_path / "g", other_gammas), s4)

    def other_temperature(meta):
        meta["sweep"]["temperature"] = 0.7

    assert "differ in sweep.temperature" in refusal(out, s1, s2, s3, edited(s4, tmp_path / "t", other_temperature))

    def other_weights(meta):
        meta["models"]["target"]["digest"] = "0" * 16

    assert "differ in models.target.digest" in refusal(out, s1, edited(s2, tmp_path / "w", other_weights), s3, s4)

    def unfinished(meta):
        meta["finished"] = False

    assert "is not finished" in refusal(out, edited(s1, tmp_path / "u", unfinished), s2, s3, s4)
    cut = edited(s1, tmp_path / "c", lambda meta: None)
    text = (cut / "runs.csv").read_bytes()
    (cut / "runs.csv").write_bytes(text[:-7])  # an interrupted write
    assert "cut mid-line" in refusal(out, cut, s2, s3, s4)
    assert "no meta.json" in refusal(out, tmp_path / "nothing")
    assert not (out / "runs.csv").exists()


def test_a_shard_interrupted_and_resumed_loses_nothing(pair, tmp_path):
    tokenizer, target, drafter = pair
    prompts = load_prompts("quick")
    config = SweepConfig(
        gammas=(1, 3),
        drafters=("model",),
        measure="all",
        max_new_tokens=6,
        timing_repeats=1,
        warmup_tokens=2,
        hf_assisted=False,
        shard=Shard(2, 4),
    )
    seen = []

    def interrupt_after_three(run, row):
        seen.append(row)
        if len(seen) == 3:
            raise KeyboardInterrupt

    args = (copy.deepcopy(target), copy.deepcopy(drafter), tokenizer, prompts, config)
    with pytest.raises(KeyboardInterrupt):
        sweep(*args, tmp_path / "cut", on_row=interrupt_after_three)
    assert len(read_rows(tmp_path / "cut" / "runs.csv")) == 3
    resumed = sweep(*args, tmp_path / "cut", resume=True)
    assert resumed.skipped == 3
    sweep(*args, tmp_path / "once")
    assert counted(read_rows(tmp_path / "cut" / "runs.csv")) == counted(read_rows(tmp_path / "once" / "runs.csv"))
    assert {r["prompt_id"] for r in read_rows(tmp_path / "once" / "runs.csv")} == {prompts[1].id, prompts[5].id}


def readme_block(language: str, containing: str) -> str:
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = text.split(f"```{language}\n")[1:]
    return next(block.split("```")[0] for block in blocks if containing in block)


def test_the_readmes_slurm_and_ray_examples_call_the_cli_as_it_is():
    """The scheduler examples only call the CLI: their command lines parse with today's options
    (the shell script is read by bash -n; the Ray script is compiled and its lists parsed)."""
    import ast
    import subprocess

    import typer

    slurm = readme_block("bash", "SLURM_ARRAY_TASK_ID")
    assert subprocess.run(["bash", "-n"], input=slurm, text=True).returncode == 0
    ray_code = readme_block("python", "ray.remote")
    tree = ast.parse(ray_code)
    sweep_args = next(
        ast.literal_eval(node.value.elts[1])
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple)
    )
    command = typer.main.get_command(app)
    line = [a for a in slurm.split("\n") if a.startswith("specbench sweep")][0]
    slurm_args = line.split()[2:]
    slurm_args[slurm_args.index("--shard") + 1] = "1/4"
    slurm_args[slurm_args.index("--out") + 1] = "shards/1"
    for args in (slurm_args, [*sweep_args[2:], "--shard", "1/4", "--out", "shards/1"]):
        context = command.commands["sweep"].make_context("sweep", list(args))
        assert context.params["shard"] == "1/4" and context.params["measure"] == "all"
    merge = command.commands["merge"].make_context("merge", ["merged", "shards/1", "shards/2"])
    assert merge.params["shards"] == [Path("shards/1"), Path("shards/2")]


@pytest.mark.ray
def test_the_readmes_ray_example_runs_on_a_local_ray(tmp_path, monkeypatch):
    """The README's Ray job, as written, on a local Ray instance: only its sweep arguments are
    swapped for tiny models saved as folders (and `specbench` for this interpreter's CLI)."""
    ray = pytest.importorskip("ray")
    import ast
    import sys

    from tiny_hf import save_tiny

    target = save_tiny(tmp_path / "target", seed=0)
    drafter = save_tiny(tmp_path / "drafter", seed=1)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(json.dumps({"id": f"p{i}", "category": "code", "turns": [f"print({i})"]}) + "\n" for i in range(3))
    )
    cli = [sys.executable, "-c", "from specbench.cli import app; app()"]
    tiny = [
        *("--target", target, "--drafter-model", drafter, "--dtype", "float32", "--draft-dtype", "float32"),
        *("--prompts", prompts, "--max-new-tokens", "4", "--timing-repeats", "1", "--no-hf-assisted"),
    ]
    code = readme_block("python", "ray.remote")
    head = next(line for line in code.splitlines() if line.startswith("N, SWEEP = "))
    sweep_args = ast.literal_eval(head.split("= ", 1)[1])[1]
    code = code.replace(head, f"N, SWEEP = 2, {[*cli, *sweep_args[1:], *[str(a) for a in tiny]]!r}")
    code = code.replace('["specbench", "merge"', f"[*{cli!r}, 'merge'")
    monkeypatch.chdir(tmp_path)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        exec(compile(code, "README.md", "exec"), {})
    finally:
        ray.shutdown()
    meta = json.loads((tmp_path / "merged" / "meta.json").read_text())
    assert [s["shard"] for s in meta["shards"]] == ["1/2", "2/2"] and meta["finished"]
    assert {r["prompt_id"] for r in read_rows(tmp_path / "merged" / "runs.csv")} == {"p0", "p1", "p2"}
