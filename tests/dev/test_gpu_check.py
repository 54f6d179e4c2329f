"""dev/gpu_check.sh's CPU dry run (--device cpu --tiny): the one command prepared for a GPU
machine runs end to end here, and each file it writes holds what the GPU run will read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "dev"))
import gpu_check  # noqa: E402
import gpu_graphs  # noqa: E402

GAMMAS = ["hf-defaults", *range(1, 9)]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpu-check")
    env = {**os.environ, "SPECBENCH_CACHE": str(out.parent / "cache")}
    done = subprocess.run(
        [str(ROOT / "dev" / "gpu_check.sh"), "--device", "cpu", "--tiny", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_it_writes_every_file(dry_run):
    assert sorted(p.name for p in dry_run.iterdir()) == [
        "costs-1.5b.json",
        "costs-7b.json",
        "costs-graphed-1.5b.json",
        "costs-graphed-7b.json",
        "gpu_check.json",
        "graphs.json",
        "log.txt",
        "profile.txt",
        "tests.log",
    ]


def test_costs_price_the_tiny_shapes(dry_run):
    for size in ("1.5b", "7b"):
        costs = json.loads((dry_run / f"costs-{size}.json").read_text())
        assert costs["c"] > 0 and costs["verify_cost"]["1"] == pytest.approx(1.0)
        assert [int(k) for k in costs["verify_cost"]][:8] == list(range(1, 9))


def test_graphs_time_each_model_and_k_and_reprice_the_costs(dry_run):
    """On a CPU the graph column stays empty; the static and dynamic forwards are timed for
    every model and k, and the re-priced costs keep the file's form with the fastest way's
    prices."""
    report = json.loads((dry_run / "graphs.json").read_text())
    assert list(report["models"]) == list(gpu_graphs.MODELS)
    for rows in report["models"].values():
        assert [r["k"] for r in rows] == list(gpu_graphs.KS)
        for row in rows:
            assert row["dynamic_ms"] > 0 and row["static_ms"] > 0
            assert row["graph_ms"] is None and row["graph_equals_static"] is None
    drafter = report["models"]["qwen2-0.5b"]
    for size in ("1.5b", "7b"):
        eager = json.loads((dry_run / f"costs-{size}.json").read_text())
        graphed = json.loads((dry_run / f"costs-graphed-{size}.json").read_text())
        target = report["models"][f"qwen2-{size}"]
        assert set(graphed) == set(eager) | {"forwards"}
        assert graphed["c"] == pytest.approx(gpu_graphs.fastest(drafter[0]) / gpu_graphs.fastest(target[0]))
        assert graphed["verify_cost"]["1"] == pytest.approx(1.0)
        assert graphed["costs"]["drafter_cost"].keys() == eager["costs"]["drafter_cost"].keys()


def test_graphed_costs_price_every_forward_at_its_fastest_way():
    def row(k, dynamic, static, graph):
        return dict(k=k, dynamic_ms=dynamic, static_ms=static, graph_ms=graph)

    drafter = [row(1, 10.0, 12.0, 2.0), row(2, 11.0, 12.0, 3.0)]
    target = [row(1, 16.0, 17.0, 4.0), row(2, 17.0, 18.0, 5.0), row(3, 17.0, 18.0, None), row(4, 4.8, 18.0, None)]
    eager = {
        "c": 0.8,
        "verify_cost": {"1": 1.0, "2": 1.1},
        "costs": {
            "c": 0.8,
            "drafter_step_seconds": 0.010,
            "target_step_seconds": 0.016,
            "plain_step_seconds": 0.07,
            "verify_cost": {"1": 1.0, "2": 1.1},
            "verify_measured": {"1": 1.0, "2": 1.1},
            "drafter_cost": {"1": 1.0, "2": 1.1, "16": 4.0},
            "loop_seconds": 0.0002,
        },
    }
    out = gpu_graphs.graphed_costs(eager, drafter, target)
    block = out["costs"]
    assert out["c"] == block["c"] == pytest.approx(0.5)
    assert block["target_step_seconds"] == block["plain_step_seconds"] == pytest.approx(0.004)
    # k = 3 was not captured (its fastest is dynamic, 17 ms); k = 4 ran in 4.8 ms: the two are
    # pooled, (17 + 4.8) / 2 = 10.9 ms each, as specbench costs fits v(k); the raw ratios stay measured
    assert block["verify_cost"] == pytest.approx({"1": 1.0, "2": 1.25, "3": 2.725, "4": 2.725})
    assert block["verify_measured"] == pytest.approx({"1": 1.0, "2": 1.25, "3": 4.25, "4": 1.2})
    assert out["verify_cost"] == block["verify_cost"]
    # a read keeps its eager seconds (4 eager steps of 10 ms), now over a 2 ms step
    assert block["drafter_cost"] == pytest.approx({"1": 1.0, "2": 1.5, "16": 20.0})
    assert block["loop_seconds"] == 0.0002 and eager["costs"]["c"] == 0.8  # the source is left alone


def test_a_static_cache_forward_gives_the_dynamic_one_s_logits():
    """What the graph replays (a StaticCache given the positions) computes what the loop's
    DynamicCache does, in float32 on the CPU: same argmax, logits within rounding."""
    model = gpu_check.random_model("qwen2-1.5b", True, torch.float32, "cpu")
    context = gpu_check.prompt(512, 20, seed=3)
    rows = gpu_graphs.forwards(model, context, repeats=1, capture=False, vocab=512)
    assert [r["k"] for r in rows] == list(gpu_graphs.KS)
    for row in rows:
        assert row["static_vs_dynamic_argmax_equal"]
        assert row["static_vs_dynamic_max_abs"] < 1e-4


def test_parity_and_sweep(dry_run):
    report = json.loads((dry_run / "gpu_check.json").read_text())
    assert report["machine"]["device"] == "cpu" and report["tiny"]
    for dtype in ("float32", "bfloat16"):
        parity = report[f"parity_{dtype}"]
        assert parity["runs"] == 2 * 8
        assert all(m["logit_gap"] >= 0 for m in parity["mismatches"])
    assert report["parity_float32"]["mismatches"] == []
    rows = report["sweep"]
    assert [r["gamma"] for r in rows] == GAMMAS
    for row in rows:
        assert row["plain_tps"] > 0 and row["specbench_tps"] > 0 and row["hf_assisted_tps"] > 0
        assert row["specbench_speedup"] == pytest.approx(row["specbench_tps"] / row["plain_tps"])
        assert row["specbench_overhead_ms_per_round"] >= 0
        assert 0 <= row["acceptance_rate"] <= 1


def test_attention_a_b_times_both_backends_on_new_and_seen_lengths(dry_run):
    report = json.loads((dry_run / "gpu_check.json").read_text())
    rows = report["attention"]
    assert [r["attention"] for r in rows] == ["as-is", "no-cudnn"]
    for row in rows:
        for way in ("plain", "specbench"):
            assert row[f"{way}_new_tps"] > 0 and row[f"{way}_seen_tps"] > 0
    assert report["later_scale_float32"] in gpu_check.SCALES


def test_quieted_later_layers_set_acceptance_by_construction():
    """At scale 0 the target's later layers add nothing to its residual stream, so it is its
    first-layers drafter exactly and every draft is accepted; any other scale multiplies
    just those layers' output projections."""
    ids = gpu_check.prompt(512, 16, seed=0)
    target, drafter, scale = gpu_check.built_pair("qwen2-1.5b", True, torch.float32, "cpu", 2, 0.0, ids)
    assert scale == 0.0
    assert gpu_check.acceptance(target, drafter, ids, tokens=24) == 1.0
    model = gpu_check.random_model("qwen2-1.5b", True, torch.float32, "cpu")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    gpu_check.quiet_later_layers(model, 2, 0.25)
    for name, weight in model.state_dict().items():
        later = name.startswith(("model.layers.2.", "model.layers.3.")) and ("o_proj" in name or "down_proj" in name)
        assert torch.equal(weight, before[name] * 0.25 if later else before[name]), name


def test_profile_names_the_rounds_parts(dry_run):
    text = (dry_run / "profile.txt").read_text()
    assert text.startswith("rounds ")
    for part in gpu_check.LABELLED:
        assert f"specbench.{part}" in text
    assert "Self CPU" in text


def test_log_and_tests_log(dry_run):
    log = (dry_run / "log.txt").read_text()
    assert "parity_bfloat16:" in log and "hf-defaults" in log
    assert "tests/core/test_cuda.py" in (dry_run / "tests.log").read_text() or "skipped" in log


def test_configs_have_the_real_shapes():
    config = gpu_check.config_dict("qwen2-7b", tiny=False)
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_key_value_heads"]) == (3584, 28, 4)
    assert gpu_check.config_dict("qwen2-1.5b", tiny=False)["vocab_size"] == 151936
