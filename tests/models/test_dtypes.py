"""What "auto" stands for (models/dtypes.py's pure choice, no GPU or kernel needed) and that
a PairConfig resolves it on first read, not on construction."""

from __future__ import annotations

import pytest

from specbench.models import dtypes
from specbench.models.dtypes import auto_draft_dtype, auto_target_dtype
from specbench.models.loading import KERNELS_TASK, PairConfig, resolve_dtypes


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_auto_on_a_cuda_device_is_bfloat16_for_both_models(device):
    for kernels in (True, False):
        assert auto_target_dtype(device, int8_kernel=kernels, q4k_kernel=kernels, q4k_layers=kernels) == "bfloat16"
        assert auto_draft_dtype(device, torch_int8=kernels, q4k_kernel=kernels) == "bfloat16"


def test_auto_on_the_cpu_is_the_fastest_format_whose_kernels_run():
    assert auto_target_dtype("cpu", int8_kernel=True, q4k_kernel=True, q4k_layers=True) == "q4k"
    assert auto_target_dtype("cpu", int8_kernel=True, q4k_kernel=True, q4k_layers=False) == "int8"
    assert auto_target_dtype("cpu", int8_kernel=True, q4k_kernel=False, q4k_layers=True) == "int8"
    assert auto_target_dtype("cpu", int8_kernel=False, q4k_kernel=False, q4k_layers=True) == "float32"
    assert auto_draft_dtype("cpu", torch_int8=True, q4k_kernel=True) == "q4k"
    assert auto_draft_dtype("cpu", torch_int8=True, q4k_kernel=False) == "int8"
    assert auto_draft_dtype("cpu", torch_int8=False, q4k_kernel=False) == "bfloat16"


def test_auto_elsewhere_keeps_a_float32_target_and_a_bfloat16_drafter():
    for device in ("mps", "auto"):
        assert auto_target_dtype(device, int8_kernel=True, q4k_kernel=True, q4k_layers=True) == "float32"
        assert auto_draft_dtype(device, torch_int8=True, q4k_kernel=True) == "bfloat16"


def test_a_pair_config_asks_for_kernels_only_when_a_dtype_is_read(monkeypatch):
    asked = []
    monkeypatch.setattr(dtypes, "target_int8_why_not", lambda: asked.append("int8") or "no kernel")
    monkeypatch.setattr(dtypes, "q4k_why_not", lambda: asked.append("q4k") or "no kernel")
    config = PairConfig()
    assert asked == []
    assert config.dtype == "float32" and config.draft_dtype in ("int8", "bfloat16")
    assert config.dtype == "float32" and len(asked) == 2  # resolved once, then kept
    assert PairConfig(dtype="bf16", device="cuda").dtype == "bf16"  # named dtypes pass through


def test_resolving_auto_on_the_cpu_is_reported_once_as_a_progress_line(monkeypatch):
    monkeypatch.setattr(dtypes, "target_int8_why_not", lambda: "no kernel")
    monkeypatch.setattr(dtypes, "q4k_why_not", lambda: "no kernel")
    reported = []
    config = PairConfig()
    assert resolve_dtypes(config, lambda *call: reported.append(call)) == ("float32", config.draft_dtype)
    assert reported == [(KERNELS_TASK, 0, None), (KERNELS_TASK, 1, 1)]
    resolve_dtypes(config, lambda *call: reported.append(call))  # already resolved
    resolve_dtypes(PairConfig(dtype="float32", draft_dtype="bf16"), lambda *call: reported.append(call))
    resolve_dtypes(PairConfig(device="cuda"), lambda *call: reported.append(call))  # no kernel asked
    assert len(reported) == 2
