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
        "gpu_check.json",
        "log.txt",
        "profile.txt",
        "tests.log",
    ]


def test_costs_price_the_tiny_shapes(dry_run):
    for size in ("1.5b", "7b"):
        costs = json.loads((dry_run / f"costs-{size}.json").read_text())
        assert costs["c"] > 0 and costs["verify_cost"]["1"] == pytest.approx(1.0)
        assert [int(k) for k in costs["verify_cost"]][:8] == list(range(1, 9))


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
