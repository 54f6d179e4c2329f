"""The int8 target (`--dtype int8`: quantize.Int8TargetLinear over int8_linear.c).

What must hold: the kernel equals an exact integer reference bit for bit (so a row's result
cannot depend on the other rows of a call), the quantizer in C equals the PyTorch one, and a
target whose layers are int8 verifies k tokens in one forward with exactly the logits its
one-token steps give, so greedy speculative decoding reproduces its plain decoding. The
tests skip where the AVX2 kernel is not built (a CPU without AVX2, no compiler).
"""

from __future__ import annotations

import pytest
import torch
from chi_square import speculative_pvalues
from conftest import accepted_with_greedy_parity, block_and_steps, int8_target, noisy_copy, tiny_model
from tiny_hf import save_tiny

from specbench.core.attention import ROWS
from specbench.core.sampling import SamplingConfig
from specbench.errors import ModelError
from specbench.models.dtypes import parse_target_dtype
from specbench.models.model import load_model
from specbench.models.specs import parse_model_spec
from specbench.speed import native, quantize
from specbench.speed.quantize import Int8TargetLinear, exact_int8_linear, quantize_rows, quantize_target

needs_kernel = pytest.mark.needs_kernel("linear")


def exact_reference(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """int8_linear.c's contract in PyTorch: int16 activations per row, an integer product
    summed exactly (int64), then ((acc * x_scale) * w_scale) + bias in float32."""
    amax = x.abs().amax(dim=1)
    x_scale = torch.where(amax > 0, amax / 32767.0, torch.ones_like(amax))
    xq = torch.round(x * (1.0 / x_scale)[:, None]).clamp(-32767, 32767).long()
    out = (xq @ qweight.long().T).float() * x_scale[:, None]
    out = out * scales[None, :]
    return out if bias is None else out + bias


@needs_kernel
@pytest.mark.parametrize(
    "rows,width,out", [(1, 7, 3), (2, 16, 8), (5, 50, 9), (9, 2100, 13), (3, 4500, 70), (33, 64, 5)]
)
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_kernel_equals_the_exact_integer_reference(rows, width, out, with_bias):
    """Odd widths exercise the tail columns; widths past 2048 the int32 -> int64 chunks."""
    generator = torch.Generator().manual_seed(rows * 100 + width + out)
    qweight, scales = quantize_rows(torch.randn(out, width, generator=generator), torch.float32)
    bias = torch.randn(out, generator=generator) if with_bias else None
    x = torch.randn(rows, width, generator=generator) * 4
    x[0, 0] = 0.0
    got = exact_int8_linear(x, qweight, scales, bias)
    assert torch.equal(got, exact_reference(x, qweight, scales, bias))


@needs_kernel
def test_a_row_gets_the_same_bits_alone_and_among_others():
    generator = torch.Generator().manual_seed(1)
    qweight, scales = quantize_rows(torch.randn(40, 300, generator=generator), torch.float32)
    x = torch.randn(11, 300, generator=generator)
    x[3] *= 1e4  # a row with a much larger scale must not change the others
    together = exact_int8_linear(x, qweight, scales, None)
    alone = torch.cat([exact_int8_linear(x[i : i + 1], qweight, scales, None) for i in range(11)])
    assert torch.equal(together, alone)


@needs_kernel
def test_the_worst_case_sum_does_not_overflow():
    """Every activation at its largest int16 value against +127 weights across 8960 columns:
    far past int32 in one sum, exact with the int64 chunks."""
    width = 8960
    x = torch.full((1, width), 2.0)
    qweight = torch.full((2, width), 127, dtype=torch.int8)
    assert 32767 * 127 * width > 2**31  # the integer sum is past int32
    got = exact_int8_linear(x, qweight, torch.ones(2), None)
    assert torch.equal(got, exact_reference(x, qweight, torch.ones(2), None))
    assert got[0, 0].item() == pytest.approx(2.0 * 127 * width, rel=1e-6)  # not wrapped around


@needs_kernel
@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.bfloat16])
def test_the_c_quantizer_equals_pytorchs(monkeypatch, weight_dtype, scale_dtype):
    weight = (torch.randn(300, 96, generator=torch.Generator().manual_seed(2)) * 0.05).to(weight_dtype)
    weight[5] = 0.0  # an all-zero row takes the smallest scale
    weight[9] *= 1e-9
    fast = quantize_rows(weight, scale_dtype)
    monkeypatch.setattr(native, "linear_kernel", lambda: None)
    slow = quantize_rows(weight, scale_dtype)
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])


@needs_kernel
def test_the_target_keeps_no_float_linear_weights():
    model = int8_target()
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    layers = [m for m in model.modules() if isinstance(m, Int8TargetLinear)]
    assert layers and all(m.qweight.dtype == torch.int8 and m.scales.dtype == torch.float32 for m in layers)


@needs_kernel
def test_k_tokens_at_once_give_the_logits_of_k_single_steps():
    """The property greedy parity rests on: the verify pass's rows equal one-token steps'."""
    model = int8_target()
    prompt, tail = torch.tensor([[1, 5, 9, 12, 3]]), torch.tensor([[7, 40, 2, 2, 61, 13]])
    together, steps = block_and_steps(model, prompt, tail)
    assert torch.equal(together, steps)


@needs_kernel
@pytest.mark.parametrize("gamma", range(1, 9))
def test_greedy_speculative_equals_plain_with_an_int8_target(gamma):
    target = int8_target()
    assert accepted_with_greedy_parity(target, noisy_copy(tiny_model(0), 0.2, seed=7), gamma) > 0


@needs_kernel
def test_sampling_with_an_int8_target_follows_its_distribution():
    """Three new tokens of seeded speculative runs against the int8 target's exact
    distribution (top-k 4 keeps it to 64 outcomes), with a drafter that often disagrees:
    chi-square on each token and on the first pair."""
    target = int8_target()
    drafter = noisy_copy(tiny_model(0), 0.5, seed=3)
    found, rejected = speculative_pvalues(target, drafter, [1, 5, 9], SamplingConfig(temperature=1.0, top_k=4))
    assert rejected > 100  # q differs from p: rejections and corrections really happen
    assert min(found.values()) > 1e-3, found


@needs_kernel
def test_load_model_builds_an_int8_target_from_a_folder(tmp_path):
    folder = save_tiny(tmp_path / "tiny")
    loaded = load_model(parse_model_spec(str(folder)), role="target", dtype="int8")
    assert sum(isinstance(m, Int8TargetLinear) for m in loaded.model.modules()) == 2 * 7 + 1
    assert not any(type(m) is torch.nn.Linear for m in loaded.model.modules())
    assert loaded.model.config._attn_implementation == ROWS  # a CPU target's rows: core/attention.py
    drafter = load_model(parse_model_spec(str(folder)), role="drafter", dtype="bfloat16")
    assert drafter.model.config._attn_implementation == "sdpa"


def test_without_the_kernel_an_int8_target_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setattr(native, "linear_kernel", lambda: None)
    monkeypatch.setattr(native, "linear_why_not", lambda: "no C compiler (cc or gcc) on PATH")
    with pytest.raises(ModelError, match="AVX2 kernel: no C compiler"):
        parse_target_dtype("int8", "cpu")
    with pytest.raises(ValueError, match="no C compiler"):
        quantize_target(tiny_model(0))
    with pytest.raises(RuntimeError, match="no C compiler"):
        quantize.exact_int8_linear(torch.ones(1, 4), torch.ones(2, 4, dtype=torch.int8), torch.ones(2), None)
