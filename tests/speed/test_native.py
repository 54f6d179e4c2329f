"""specbench's own int8 kernels (native.py): int8_gemv.c (AVX512-VNNI draft steps) and
int8_linear.c (AVX2, any rows, exact), the numbers they compute, and the fallbacks when they
cannot be built or do not take a call. Each test skips on a CPU without its instructions."""

from __future__ import annotations

import pytest
import torch

from specbench.speed import native, quantize

needs_gemv = pytest.mark.needs_kernel("gemv")
needs_linear = pytest.mark.needs_kernel("linear")
needs_either = pytest.mark.needs_kernel("gemv", "linear", either=True)


def reference(x, qweight, scales, bias):
    """The product over the int8 rows times their scales, in fp32 (no bf16 rounding of the weight)."""
    out = x.float() @ (qweight.float() * scales.float()[:, None]).T
    return out if bias is None else out + bias.float()


@needs_either
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
@pytest.mark.parametrize("out_features,in_features", [(64, 896), (1150, 900), (7, 33), (3, 8)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_the_dequantized_product_to_bf16_rounding(rows, out_features, in_features, with_bias):
    generator = torch.Generator().manual_seed(rows * 1000 + out_features + in_features)
    qweight, scales = quantize.quantize_rows(torch.randn(out_features, in_features, generator=generator))
    bias = torch.randn(out_features, generator=generator).bfloat16() if with_bias else None
    x = (torch.randn(1, rows, in_features, generator=generator) * 3).bfloat16()
    got = quantize.fast_int8_linear(x, qweight, scales, bias)
    assert got.shape == (1, rows, out_features) and got.dtype == torch.bfloat16
    want = reference(x, qweight, scales, bias)
    # the output is bf16 (a relative step of 2^-8) and x is rounded to 15 bits per row
    assert torch.allclose(got.float(), want, rtol=2**-8, atol=want.abs().max().item() * 2**-12)


@needs_either
def test_rows_of_very_different_size_keep_their_own_scale():
    qweight, scales = quantize.quantize_rows(torch.randn(16, 64, generator=torch.Generator().manual_seed(1)))
    x = torch.randn(1, 2, 64, generator=torch.Generator().manual_seed(2)).bfloat16()
    x[0, 1] *= 1e-4  # a row 10,000 times smaller must not lose its precision to the other's scale
    got = quantize.fast_int8_linear(x, qweight, scales, None).float()
    want = reference(x, qweight, scales, None)
    assert torch.allclose(got[0, 1], want[0, 1], rtol=2**-8, atol=want[0, 1].abs().max().item() * 2**-12)


@needs_gemv
def test_more_rows_than_the_kernel_takes_run_pytorchs_path():
    qweight, scales = quantize.quantize_rows(torch.randn(32, 64, generator=torch.Generator().manual_seed(3)))
    x = torch.randn(1, quantize.MAX_INT8_ROWS + 1, 64, generator=torch.Generator().manual_seed(4)).bfloat16()
    assert torch.equal(
        quantize.fast_int8_linear(x, qweight, scales, None), quantize.int8_linear(x, qweight, scales, None)
    )


@needs_either
def test_turned_off_or_unbuildable_it_says_why_and_callers_fall_back(monkeypatch, tmp_path):
    had_gemv, had_linear = native.kernel() is not None, native.linear_kernel() is not None
    try:
        monkeypatch.setenv("SPECBENCH_NATIVE", "0")
        native._load.cache_clear()
        assert native.kernel() is None and native.why_not() == "SPECBENCH_NATIVE=0"
        assert native.linear_kernel() is None and native.linear_why_not() == "SPECBENCH_NATIVE=0"
        assert native.name() == "torch._weight_int8pack_mm (SPECBENCH_NATIVE=0)"
        monkeypatch.delenv("SPECBENCH_NATIVE")
        monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))  # nothing built there yet
        monkeypatch.setenv("CC", "false")  # a compiler that always fails
        native._load.cache_clear()
        assert native.kernel() is None and native.why_not().startswith("the build failed")
        assert native.linear_kernel() is None and native.linear_why_not().startswith("the build failed")
        qweight, scales = quantize.quantize_rows(torch.randn(32, 64))
        x = torch.randn(1, 1, 64).bfloat16()
        assert torch.equal(
            quantize.fast_int8_linear(x, qweight, scales, None), quantize.int8_linear(x, qweight, scales, None)
        )
    finally:
        monkeypatch.undo()
        native._load.cache_clear()
    assert (native.kernel() is not None, native.linear_kernel() is not None) == (had_gemv, had_linear)


@needs_linear
def test_it_builds_into_the_cache_keyed_by_source_and_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    native._load.cache_clear()
    try:
        assert native.linear_kernel() is not None
        built = list((tmp_path / "native").glob("int8_linear-*.so"))
        assert len(built) == 1 and native._key(native._compiler(), native.LINEAR) in built[0].name
        assert native._key(native._compiler(), native.LINEAR) != native._key(native._compiler(), native.GEMV)
    finally:
        monkeypatch.undo()
        native._load.cache_clear()
