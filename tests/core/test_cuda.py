"""The lossless core and the CLI on a CUDA device (skipped where PyTorch sees none, as in CI).

Every other test runs on the CPU. These check the same promises on a GPU, where specbench
runs transformers' own kernels (its batch-invariant kernels and row-invariant attention are
CPU-only): greedy speculative decoding equals plain greedy decoding for every drafter and
gamma policy; sampled outputs follow the target's exact distribution (and the check still
catches a wrong residual there); `generate` and `sweep` run end to end with `--device cuda`.

Greedy parity on a GPU holds where no near tie meets the rounding differences between a
verify forward's rows and one-token steps, not by construction. The tiny models are float32
(PyTorch keeps float32 matmuls out of TF32 unless asked); a bf16 model on a GPU can flip a
near tie, and a sweep's identical_to_baseline column reports it.

On a GPU machine: python -m pytest tests/core/test_cuda.py. SPECBENCH_CUDA_DTYPE=bfloat16 runs the
model tests in bf16: the sampling tests as they are, the greedy parity tests skipped, since
dev/gpu_check.py counts bf16 greedy mismatches and prints each one's logit gap instead.
"""

from __future__ import annotations

import copy
import json
import os
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from chi_square import speculative_pvalues
from conftest import PROMPTS, SHARPENED_THRESHOLDS, accepted_with_greedy_parity, noisy_copy, sharpened, tiny_model
from tiny_hf import save_tiny
from typer.testing import CliRunner

import specbench.core.verify
from specbench import paths
from specbench.cli import app
from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
from specbench.core.sampling import SamplingConfig
from specbench.drafters import DRAFTERS, make_drafter
from specbench.policies import POLICIES, make_policy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = "cuda"
DTYPE = getattr(torch, os.environ.get("SPECBENCH_CUDA_DTYPE", "float32"))
greedy_parity = pytest.mark.skipif(DTYPE != torch.float32, reason="bf16 greedy mismatches: dev/gpu_check.py")
# a cheap drafter and a GPU-like flat verify curve, so the cost policy drafts several tokens
COSTS = SimpleNamespace(c=0.1, verify_cost={k: 1.0 + 0.02 * (k - 1) for k in range(1, 13)})


def on_gpu(model):
    return copy.deepcopy(model).to(CUDA, DTYPE)


@pytest.fixture(scope="module")
def gpu_close_pair(close_pair):
    target, drafter = close_pair
    return on_gpu(target), on_gpu(drafter)


@pytest.fixture(scope="module")
def gpu_sharpened_drafter(close_pair):
    """close_pair's drafter with a peakier q: egag and the stop policies get varied rows."""
    return on_gpu(sharpened(close_pair[1]))


@greedy_parity
@pytest.mark.parametrize("gamma", range(1, 9))
def test_greedy_parity_for_every_gamma(gpu_close_pair, gamma):
    assert accepted_with_greedy_parity(*gpu_close_pair, gamma) > 0


@greedy_parity
@pytest.mark.parametrize("policy_name", POLICIES)
@pytest.mark.parametrize("drafter_name", DRAFTERS)
def test_greedy_parity_for_every_drafter_and_policy(gpu_close_pair, gpu_sharpened_drafter, drafter_name, policy_name):
    target, drafter_model = gpu_close_pair[0], gpu_sharpened_drafter
    config = GenerationConfig(max_new_tokens=24)
    accepted = 0
    for prompt in PROMPTS:
        policy = make_policy(policy_name, 3, gamma_max=6, threshold=SHARPENED_THRESHOLDS.get(policy_name), costs=COSTS)
        result = speculative_generate(target, make_drafter(drafter_name, drafter_model), prompt, config, policy)
        assert result.token_ids == plain_generate(target, prompt, config).token_ids, (drafter_name, policy_name, prompt)
        accepted += result.stats.accepted
    assert accepted > 0  # drafts really reached verification and some survived


def test_sampling_follows_the_targets_distribution():
    """Three new tokens of seeded speculative runs on the GPU against the target's exact
    distribution (top-k 4 keeps it to 64 outcomes), with a drafter that often disagrees."""
    target, drafter = on_gpu(tiny_model(0)), on_gpu(noisy_copy(tiny_model(0), 0.5, seed=3))
    found, rejected = speculative_pvalues(target, drafter, [1, 5, 9], SamplingConfig(temperature=1.0, top_k=4))
    assert rejected > 100  # corrections from the residual really happen
    assert min(found.values()) > 1e-3, found


def test_the_check_still_catches_a_wrong_residual(monkeypatch):
    """Power check on the GPU: resampling corrections from p instead of norm(max(0, p - q))."""
    monkeypatch.setattr(specbench.core.verify, "residual_distribution", lambda p, q: p)
    target, drafter = on_gpu(tiny_model(0)), on_gpu(noisy_copy(tiny_model(0), 0.5, seed=3))
    found, _ = speculative_pvalues(target, drafter, [1, 5, 9], SamplingConfig(temperature=1.0, top_k=4))
    assert min(found.values()) < 1e-6, found


# ---------------------------------------------------------------------------- the CLI

runner = CliRunner()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda-models")
    target = tiny_model(0)
    return str(save_tiny(root / "target", like=target, noise=0.0)), str(
        save_tiny(root / "drafter", like=target, noise=0.3, seed=5)
    )


@pytest.fixture(autouse=True)
def temp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))


def generate_ids(target: str, *args: str) -> dict:
    result = runner.invoke(
        app,
        [
            "generate",
            "write a sorting function",
            "--target",
            target,
            "--device",
            CUDA,
            "--json",
            "--max-new-tokens",
            "32",
            *args,
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@greedy_parity
@pytest.mark.parametrize("policy_name", ["fixed", "cost"])
def test_generate_on_cuda_equals_plain(folders, policy_name):
    target, drafter = folders
    spec = generate_ids(target, "--drafter", drafter, "--gamma-policy", policy_name, "--gamma", "4")
    plain = generate_ids(target, "--drafter", "none")
    assert spec["token_ids"] == plain["token_ids"]
    assert spec["stats"]["drafted"] > 0


def test_sweep_on_cuda_checks_every_run(folders, tmp_path):
    target, drafter = folders
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("write a sorting function\nexplain a hash map\n")
    out = tmp_path / "sweep"
    args = [
        "sweep",
        "--target",
        target,
        "--drafter-model",
        drafter,
        "--prompts",
        str(prompts),
        "--gamma",
        "1..3",
        "--max-new-tokens",
        "16",
        "--measure",
        "all",
        "--device",
        CUDA,
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    runs = pd.read_csv(out / "runs.csv")
    measured = runs[(runs["source"] == "measured") & (runs["method"] == "specbench")]
    assert len(measured) >= 2 * 3 and measured["identical_to_baseline"].astype(bool).all()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["machine"]["cuda"] == torch.cuda.get_device_name(0)


def test_a_drafter_on_cuda_reads_many_ids_in_one_forward(gpu_close_pair):
    """The lean row-by-row forward is a CPU path: on a GPU a catch-up of 9 ids is one HF
    forward, not one per MAX_LEAN_ROWS rows (the first H200 costs run paid u(5) = 2.06)."""
    from specbench.core.cache import new_cache
    from specbench.speed import draft_vocab
    from specbench.speed.lean_step import lean_decoder

    _, drafter = gpu_close_pair
    assert lean_decoder(drafter) is None
    calls = []
    hook = drafter.get_decoder().register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        ids = torch.tensor([list(range(3, 12))], device=CUDA)
        hidden = draft_vocab.draft_hidden(drafter, ids, new_cache(drafter))
    finally:
        hook.remove()
    assert hidden.shape[1] == 9 and len(calls) == 1
