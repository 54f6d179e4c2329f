"""A q4k drafter's layers as native calls (fused_step.py, q4k_layer.c).

What must hold: they run exactly where they apply (a q4k drafter of a Qwen2 or Llama
layout; never an int8 or float32 one, never without the library); they compute what the
lean forward computes up to float32-against-bf16 rounding, early exit included; a row's
bits do not depend on the other rows of its call (the profile's premise), over a bf16 or
a float32 cache; and greedy speculative decoding with them equals plain decoding
(test_q4k_drafter.py, tests/bench/test_profile.py: predicted exactly)."""

import pytest
import torch
from conftest import tiny_model
from transformers import LlamaConfig, LlamaForCausalLM

from specbench.core.cache import cache_arg, crop_cache, new_cache
from specbench.speed import native
from specbench.speed.fused_step import fused_layers
from specbench.speed.gguf_blocks import quantize_to_q4k
from specbench.speed.lean_step import LeanDecoder, lean_decoder
from specbench.speed.quantize import int8_available, quantize_linears

pytestmark = [
    pytest.mark.usefixtures("single_thread"),
    pytest.mark.skipif(native.layer_kernel() is None, reason=f"q4k_layer is not built here: {native.layer_why_not()}"),
]


def tiny_llama(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(config).eval()


def q4k(model, dtype: torch.dtype):
    """The model in dtype with its decoder layers as Q4_K blocks (`--draft-dtype q4k` does it in bf16)."""
    model = model.to(dtype)
    quantize_to_q4k(model)
    return model


MODELS = {
    "qwen2 bf16": lambda: q4k(tiny_model(0, layers=3), torch.bfloat16),
    "qwen2 float32": lambda: q4k(tiny_model(1, layers=3), torch.float32),
    "llama bf16": lambda: q4k(tiny_llama(2), torch.bfloat16),
}
PROMPT = torch.tensor([[3, 14, 15, 9, 26, 5, 35, 8, 9, 7]])


def _prefilled(model):
    cache = new_cache(model)
    model.get_decoder()(input_ids=PROMPT, **cache_arg(model.get_decoder(), cache), use_cache=True)
    return cache


def test_they_run_for_q4k_layers_only(monkeypatch):
    assert lean_decoder(MODELS["qwen2 bf16"]()).fused is not None
    assert lean_decoder(tiny_model(3)).fused is None  # float32 Linear layers
    if int8_available():
        int8 = tiny_model(4).to(torch.bfloat16)
        quantize_linears(int8)
        assert lean_decoder(int8).fused is None
    assert LeanDecoder(MODELS["qwen2 bf16"](), stack=False).fused is None  # a target's forward
    monkeypatch.setattr(native, "layer_kernel", lambda: None)
    assert fused_layers(LeanDecoder(MODELS["qwen2 bf16"]())) is None


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("layers", [None, 2])
@torch.inference_mode()
def test_they_compute_what_the_lean_forward_computes(name, layers):
    model = MODELS[name]()
    if layers is not None:  # an early-exit drafter: HF's decoder reads config.num_hidden_layers
        model.config.num_hidden_layers = layers
    decoder = lean_decoder(model)
    fused, theirs, mine = decoder.fused, _prefilled(model), _prefilled(model)
    for n in range(1, 5):
        new = (torch.arange(n).unsqueeze(0) * 7 + n) % 64
        got = fused(new, mine)
        decoder.fused = None
        expected = decoder(new, theirs)
        decoder.fused = fused
        assert got.dtype == expected.dtype == model.dtype
        # bf16 models: the lean forward rounds each activation to bf16, these keep float32;
        # float32 ones: another order of a sum can move an activation across an int8 step
        tolerance = {"rtol": 2e-2, "atol": 2e-2} if model.dtype == torch.bfloat16 else {"rtol": 2e-3, "atol": 2e-3}
        torch.testing.assert_close(got, expected, **tolerance)
        for a, b in zip(theirs.layers, mine.layers):
            assert b.keys.shape == a.keys.shape and b.keys.dtype == a.keys.dtype
            torch.testing.assert_close(b.keys, a.keys, **tolerance)
            torch.testing.assert_close(b.values, a.values, **tolerance)
        for cache in (theirs, mine):
            crop_cache(cache, PROMPT.shape[1])


@torch.inference_mode()
def test_a_short_prompt_on_an_empty_cache_attends_causally():
    model = MODELS["qwen2 bf16"]()
    decoder = lean_decoder(model)
    fused, theirs, mine = decoder.fused, new_cache(model), new_cache(model)
    got = fused(PROMPT[:, :4], mine)
    decoder.fused = None
    torch.testing.assert_close(got, decoder(PROMPT[:, :4], theirs), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("name", sorted(MODELS))
@torch.inference_mode()
def test_a_row_has_the_same_bits_alone_or_with_others(name):
    model = MODELS[name]()
    fused = lean_decoder(model).fused
    cache = _prefilled(model)
    new = torch.tensor([[11, 4, 60, 23]])
    one_by_one = torch.cat([fused(new[:, r : r + 1], cache) for r in range(4)], dim=1)
    alone_keys = [layer.keys.clone() for layer in cache.layers]
    for n in (2, 3, 4):
        crop_cache(cache, PROMPT.shape[1])
        together = torch.cat([fused(new[:, r : r + n], cache) for r in range(0, 4, n)], dim=1)
        assert torch.equal(together, one_by_one), n
        assert all(torch.equal(layer.keys, keys) for layer, keys in zip(cache.layers, alone_keys)), n
