"""A forward's layers in one native call over slabs under the cache (kv_slab.py,
fused_step.py, q4k_layer.c's specbench_layers).

What must hold: the one call gives every output and every cached key and value the bits the
layer-at-a-time calls give, through everything a cache meets in decoding (steps of one and
several rows, crops, HF's own forward appending in between, a deep copy that goes its own
way, a slab outgrown), for a bf16 and a float32 cache, so greedy parity rests on it as
before; tensors kept from a cache do not change when the cache goes on; and layers it does
not take (a sliding window's) still go through the cache."""

import pytest
import torch
from conftest import tiny_model
from gguf_tiny import quantize_to_q4k
from transformers import DynamicCache, Qwen2Config

from specbench.core.cache import cache_arg, cache_tensors, copy_cache, crop_cache, new_cache
from specbench.speed import kv_slab
from specbench.speed.lean_step import lean_decoder

pytestmark = [pytest.mark.usefixtures("single_thread"), pytest.mark.needs_kernel("layer")]

PROMPT = torch.tensor([[3, 14, 15, 9, 26, 5, 35, 8, 9, 7]])


def q4k_model(seed: int, dtype: torch.dtype):
    """A 3-layer Qwen2 with its decoder layers as Q4_K blocks (a q4k drafter's)."""
    model = tiny_model(seed, layers=3).to(dtype)
    quantize_to_q4k(model)
    return model


def ids(*values: int) -> torch.Tensor:
    return torch.tensor([list(values)])


@torch.inference_mode()
def decode(model) -> list[torch.Tensor]:
    """What a run of decoding meets, in order: every forward's output and the final caches'
    tensors (the original's and a deep copy's, each gone on by itself)."""
    fused, decoder = lean_decoder(model).fused, model.get_decoder()
    cache = new_cache(model)
    decoder(input_ids=PROMPT, **cache_arg(decoder, cache), use_cache=True)  # HF's forward: concatenation
    out = [fused(ids(11), cache), fused(ids(4, 60, 23), cache)]
    crop_cache(cache, PROMPT.shape[1] + 2)  # two kept: a round's rejection
    out += [fused(ids(5, 7), cache)]
    decoder(input_ids=ids(1, 2), **cache_arg(decoder, cache), use_cache=True)  # leaves the slab
    out += [fused(ids(30), cache)]
    copied = copy_cache(cache, PROMPT.shape[1] + 3)
    out += [fused(ids(12, 13, 14, 15, 16, 17), cache), fused(ids(50), copied), fused(ids(51, 52), copied)]
    out += [fused(ids(t), cache) for t in range(20, 32)]  # the slab outgrown
    return out + [t for c in (cache, copied) for pair in cache_tensors(c) for t in pair]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_one_call_gives_the_bits_of_a_layer_at_a_time(dtype, monkeypatch):
    model = q4k_model(0, dtype)
    monkeypatch.setattr(kv_slab, "ROOM", 8)  # so that the steps below outgrow the slabs
    calls = []
    real = kv_slab.slabs
    monkeypatch.setattr(kv_slab, "slabs", lambda *a: calls.append(real(*a)) or calls[-1])
    slabbed = decode(model)
    assert len(calls) == 19 and all(s is not None for s in calls)  # every fused forward took the one call
    # made at the first call (11 tokens and 8 free), again after HF's forward (17), outgrown at 26 and 35
    assert list(dict.fromkeys(layers[0][0].shape[2] for layers in calls)) == [19, 25, 34, 43]
    monkeypatch.setattr(kv_slab, "slabs", lambda *a: None)
    one_by_one = decode(model)
    assert len(slabbed) == len(one_by_one)
    for got, expected in zip(slabbed, one_by_one):
        assert got.dtype == expected.dtype == dtype and torch.equal(got, expected)


@torch.inference_mode()
def test_kept_tensors_do_not_change_as_the_cache_goes_on():
    model = q4k_model(1, torch.bfloat16)
    fused, cache = lean_decoder(model).fused, new_cache(model)
    fused(PROMPT, cache)
    fused(ids(11, 12), cache)
    kept = cache_tensors(cache)
    before = [t.clone() for pair in kept for t in pair]
    crop_cache(cache, PROMPT.shape[1])
    fused(ids(40, 41, 42), cache)  # the same positions, other rows
    assert all(torch.equal(t, b) for t, b in zip((t for pair in kept for t in pair), before))
    assert not all(torch.equal(layer.keys, k) for layer, (k, _) in zip(cache.layers, kept))


@torch.inference_mode()
def test_layers_it_does_not_take_go_through_the_cache():
    """A sliding window's layers (a window longer than the text: the same attention) are
    appended to through the cache, a layer at a time, with the same bits."""
    model = q4k_model(2, torch.bfloat16)
    fused = lean_decoder(model).fused
    config = Qwen2Config(**{**model.config.to_dict(), "use_sliding_window": True, "sliding_window": 64})
    config.layer_types, config.max_window_layers = ["sliding_attention"] * 3, 0
    sliding, plain = DynamicCache(config=config), new_cache(model)
    assert all(type(layer).__name__ == "DynamicSlidingWindowLayer" for layer in sliding.layers)
    outs = [[fused(PROMPT, cache), fused(ids(5, 6), cache)] for cache in (sliding, plain)]
    assert kv_slab.slabs(sliding, 3, 13, torch.bfloat16, 2, 8) is None
    assert not any(hasattr(layer, kv_slab.SLAB) for layer in sliding.layers)
    assert all(hasattr(layer, kv_slab.SLAB) for layer in plain.layers)
    assert all(torch.equal(a, b) for a, b in zip(*outs))
    assert all(torch.equal(a.keys, b.keys) for a, b in zip(sliding.layers, plain.layers))


def test_it_refuses_other_dtypes_and_layouts():
    model = q4k_model(3, torch.bfloat16)
    cache = new_cache(model)
    with torch.inference_mode():
        lean_decoder(model).fused(PROMPT, cache)
    assert kv_slab.slabs(cache, 3, 12, torch.float16, 2, 8) is None  # not float32 or bf16
    assert kv_slab.slabs(cache, 3, 12, torch.float32, 2, 8) is None  # the cache holds bf16
    assert kv_slab.slabs(cache, 3, 12, torch.bfloat16, 4, 8) is None  # other heads
    assert kv_slab.slabs(cache, 4, 12, torch.bfloat16, 2, 8) is None  # more layers than it has
    assert kv_slab.slabs(cache, 3, 12, torch.bfloat16, 2, 8) is not None
