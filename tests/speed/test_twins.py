"""speed/twins.py: a q4k drafter's bfloat16 twins, which its long forwards run through.

What must hold: a call of fewer than TWIN_ROWS rows still runs the Q4_K kernel bit for bit,
a longer one the twin (the same weight in bfloat16); only drafters get twins, and only on a
CPU that multiplies bfloat16 natively; the draft step sends a long catch-up over a cache
through them; and speculative decoding with a twinned drafter stays lossless. The twins are
forced on here, whatever this CPU: bfloat16 GEMMs run everywhere, only their speed differs.
"""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model
from tiny_hf import save_tiny

from specbench.bench.meta import model_meta
from specbench.core.cache import new_cache
from specbench.models.model import load_model
from specbench.models.specs import parse_model_spec
from specbench.speed import gguf_blocks, native, twins
from specbench.speed.draft_vocab import draft_hidden
from specbench.speed.gguf_blocks import TWIN_ROWS, Q4KLinear, quantize_q4k

needs_kernel = pytest.mark.needs_kernel("q4k")


def q4k_drafter(tmp_path):
    return load_model(parse_model_spec(str(save_tiny(tmp_path / "tiny", seed=0))), role="drafter", dtype="q4k").model


@needs_kernel
def test_a_layer_runs_its_twin_from_twin_rows_on():
    generator = torch.Generator().manual_seed(0)
    blocks = quantize_q4k(torch.randn(24, 300, generator=generator))
    layer = Q4KLinear(blocks, torch.randn(24, generator=generator), 300)
    x = torch.randn(TWIN_ROWS, 300, generator=generator)
    kernel = layer(x)
    layer.twin = layer.dense().to(torch.bfloat16)
    assert torch.equal(layer(x[: TWIN_ROWS - 1]), kernel[: TWIN_ROWS - 1])  # short calls: the kernel, bit for bit
    twinned = layer(x)
    assert not torch.equal(twinned, kernel)  # the twin ran ...
    assert torch.allclose(twinned, kernel, rtol=0.05, atol=0.05 * float(kernel.abs().max()))  # ... the same weight


@needs_kernel
@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this PyTorch has no oneDNN")
def test_a_packed_twin_gives_the_plain_twins_products():
    """twins.packed lays the weight out for oneDNN once; a call through it is the plain
    bfloat16 GEMM's product (3-d and 2-d inputs, with a bias), not another weight's."""
    generator = torch.Generator().manual_seed(1)
    layer = Q4KLinear(
        quantize_q4k(torch.randn(40, 512, generator=generator)), torch.randn(40, generator=generator), 512
    )
    plain = layer.dense_bf16()
    layer.twin = twins.packed(plain)
    assert layer.twin.is_mkldnn
    for shape in ((1, 37, 512), (TWIN_ROWS, 512)):
        x = torch.randn(*shape, generator=generator)
        want = torch.nn.functional.linear(x.to(torch.bfloat16), plain, layer.bias.to(torch.bfloat16)).float()
        got = layer(x)
        assert got.shape == want.shape and got.dtype == x.dtype
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2 * float(want.abs().max()))


def test_twins_go_to_a_q4k_drafter_on_a_cpu_with_native_bfloat16(tmp_path, monkeypatch):
    drafter = q4k_drafter(tmp_path)
    monkeypatch.setattr(native, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    assert not twins.native_bf16() and not twins.twins_pay(drafter)
    monkeypatch.setattr(native, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    assert twins.native_bf16() and twins.twins_pay(drafter)
    monkeypatch.setenv(twins.TWINS_ENV, "0")
    assert not twins.twins_pay(drafter)  # asked for none
    monkeypatch.delenv(twins.TWINS_ENV)
    assert not twins.twins_pay(tiny_model(0))  # float32 layers: nothing to twin
    assert not twins.has_twins(drafter) and not model_meta(drafter, "d")["bfloat16_twins"]
    made = twins.add_twins(drafter)
    layers = [m for m in drafter.get_decoder().modules() if isinstance(m, Q4KLinear)]
    assert made == len(layers) > 0 and all(m.twin.dtype == torch.bfloat16 for m in layers)
    assert twins.has_twins(drafter) and model_meta(drafter, "d")["bfloat16_twins"]  # every record says so
    packed = all(m.twin.is_mkldnn for m in layers)
    assert twins.twins_label(drafter) == ("packed bf16 twins" if packed else "bf16 twins")


@needs_kernel
def test_a_long_catch_up_over_a_cache_goes_through_the_twins(tmp_path, monkeypatch):
    drafter = q4k_drafter(tmp_path)
    calls = []
    real = gguf_blocks.twin_linear
    monkeypatch.setattr(gguf_blocks, "twin_linear", lambda x, layer: calls.append(x.shape[-2]) or real(x, layer))

    def feed(n: int) -> None:
        cache = new_cache(drafter)
        draft_hidden(drafter, torch.arange(3, 3 + 8)[None], cache)  # a prompt of 8 ids
        draft_hidden(drafter, torch.arange(20, 20 + n)[None], cache)

    feed(TWIN_ROWS)
    assert not calls  # no twins yet: the lean step's rows
    twins.add_twins(drafter)
    feed(TWIN_ROWS - 1)
    assert not calls  # too short for them
    feed(TWIN_ROWS)
    assert calls and set(calls) == {TWIN_ROWS}


@needs_kernel
@pytest.mark.parametrize("gamma", [2, 6])
def test_greedy_speculative_equals_plain_with_a_twinned_drafter(tmp_path, monkeypatch, gamma):
    """Prompts long enough that the drafter reads each through its twins."""
    from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
    from specbench.drafters import ModelDrafter
    from specbench.policies import FixedGamma

    target, drafter = tiny_model(0), q4k_drafter(tmp_path)
    twins.add_twins(drafter)
    calls = []
    real = gguf_blocks.twin_linear
    monkeypatch.setattr(gguf_blocks, "twin_linear", lambda x, layer: calls.append(1) or real(x, layer))
    config = GenerationConfig(max_new_tokens=40)
    generator = torch.Generator().manual_seed(gamma)
    accepted = 0
    for length in (TWIN_ROWS, 3 * TWIN_ROWS):
        prompt = torch.randint(0, 60, (length,), generator=generator).tolist()
        result = speculative_generate(target, ModelDrafter(drafter), prompt, config, FixedGamma(gamma))
        assert result.token_ids == plain_generate(target, prompt, config).token_ids
        accepted += result.stats.accepted
    assert calls and accepted > 0
