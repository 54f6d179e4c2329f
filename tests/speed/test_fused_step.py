"""Decoder layers of specbench's own kernels as native calls (fused_step.py, q4k_layer.c):
a q4k drafter's, and a q4k (all Q4_K, or Q4_K and Q6_K as in a Q4_K_M file), q4k-with-int8
or int8 target's.

What must hold: they run exactly where they apply (every Linear Q4_K or Q6_K blocks or a
target's int8 rows; never an int8 drafter's or a float32 model's, never without the library); they
compute what the lean forward computes up to float32-against-bf16 rounding, early exit
included; a row's bits do not depend on the other rows of its call (the profile's premise,
and a target's greedy parity), over a bf16 or a float32 cache; a copy of a model runs its
own weights; and greedy speculative decoding with them equals plain decoding (here for
targets; test_q4k_drafter.py, test_q4k_target.py and tests/bench/test_profile.py for
drafters)."""

import copy

import pytest
import torch
from conftest import accepted_with_greedy_parity, as_cpu_target, block_and_steps, int8_target, noisy_copy, tiny_model
from gguf_tiny import Q4_K_M_LIKE, q4k_model_and_file, q4k_target, quantize_to_q4k, use_gguf_blocks
from transformers import LlamaConfig, LlamaForCausalLM

from specbench.core.cache import cache_arg, crop_cache, new_cache
from specbench.speed import native
from specbench.speed.draft_vocab import draft_hidden
from specbench.speed.fused_step import FusedLayers, fused_layers
from specbench.speed.lean_step import LeanDecoder, lean_decoder
from specbench.speed.quantize import int8_available, quantize_linears, quantize_target

pytestmark = [
    pytest.mark.usefixtures("single_thread"),
    pytest.mark.needs_kernel("layer"),
]


def tiny_llama(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
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


def mixed_target(tmp_path, seed: int = 7):
    """A tiny q4k target whose layer 1 v is float32 in its file (neither Q4_K nor Q6_K):
    int8 rows, as loading makes them."""
    model, path = q4k_model_and_file(tmp_path, seed, skip="blk.1.attn_v")
    assert use_gguf_blocks(model, str(path)) == (2 * 7, 1)
    assert quantize_target(model) == 1
    return model


def _folder(tmp_path, name: str):
    (tmp_path / name).mkdir()
    return tmp_path / name


TARGETS = {
    "q4k": lambda tmp_path: q4k_target(tmp_path, 7),
    "q4k and q6k": lambda tmp_path: q4k_target(tmp_path, 7, Q4_K_M_LIKE),
    "q4k and int8": mixed_target,
    "int8": lambda tmp_path: int8_target(8),
}


def test_they_run_for_layers_of_specbenchs_own_kernels_only(monkeypatch, tmp_path):
    assert lean_decoder(MODELS["qwen2 bf16"]()).fused is not None
    assert lean_decoder(tiny_model(3)).fused is None  # float32 Linear layers
    if int8_available():
        int8 = tiny_model(4).to(torch.bfloat16)
        quantize_linears(int8)
        assert lean_decoder(int8).fused is None  # a drafter's int8 rows (bf16 scales)
    for name, make in TARGETS.items():
        assert LeanDecoder(make(_folder(tmp_path, name)), stack=False).fused is not None, name  # a target's forward
    model, path = q4k_model_and_file(_folder(tmp_path, "left"), 9, skip="blk.1.attn_v")
    use_gguf_blocks(model, str(path))
    assert LeanDecoder(model, stack=False).fused is None  # one float32 Linear left
    mixed = mixed_target(_folder(tmp_path, "mixed"))
    monkeypatch.setattr(native, "linear_kernel", lambda: None)
    assert fused_layers(LeanDecoder(mixed, stack=False)) is None  # int8 rows need int8_linear.c
    assert fused_layers(LeanDecoder(q4k_target(_folder(tmp_path, "only q4k"), 7), stack=False)) is not None
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


@pytest.mark.parametrize("name", sorted(MODELS))
@torch.inference_mode()
def test_a_drafters_first_call_gives_its_rows_the_bits_of_one_row_steps(name):
    """A drafter's first model round reads the prompt and every id after it in one call
    (the prefill is deferred until the policy wants a model draft): through native layers
    each of those rows gets the bits the prompt's call and then one-row steps give it, the
    way the sweep's profile feeds them (draft_vocab.path_logits), so the profile predicts
    such a round exactly."""
    model = MODELS[name]()
    ids = torch.cat([PROMPT, torch.tensor([[11, 4, 60, 23, 7, 5]])], dim=1)
    start = PROMPT.shape[1]
    together = draft_hidden(model, ids, new_cache(model))
    cache = new_cache(model)
    rows = [draft_hidden(model, PROMPT, cache)]
    rows += [draft_hidden(model, ids[:, t : t + 1], cache) for t in range(start, ids.shape[1])]
    assert together.shape[1] == ids.shape[1]
    assert torch.equal(together, torch.cat(rows, dim=1))


# ---------------------------------------------------------------------------- a target's


@pytest.mark.parametrize("name", sorted(TARGETS))
@torch.inference_mode()
def test_a_targets_forward_over_a_cache_runs_them_close_to_its_own(name, tmp_path, monkeypatch):
    model = as_cpu_target(TARGETS[name](tmp_path))
    calls = []
    fused_call = FusedLayers.__call__
    monkeypatch.setattr(
        FusedLayers, "__call__", lambda self, ids, cache: calls.append(ids.shape[1]) or fused_call(self, ids, cache)
    )
    theirs, mine = new_cache(model), new_cache(model)
    for cache, forward in ((theirs, model.forward.own), (mine, model)):
        forward(input_ids=PROMPT, **cache_arg(model, cache), use_cache=True)
    assert calls == []  # the prompt's first forward is the model's own, in every mode
    for n in (1, 3, 9):
        new = (torch.arange(n).unsqueeze(0) * 7 + n) % 64
        expected = model.forward.own(input_ids=new, **cache_arg(model, theirs), use_cache=True).logits
        got = model(input_ids=new, **cache_arg(model, mine), use_cache=True).logits
        # another order of float32 sums; an activation may cross a step of the kernels' int8 activations
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3 * float(expected.abs().max()))
        assert torch.equal(got.argmax(-1), expected.argmax(-1))
    assert calls == [1, 3, 9]


@pytest.mark.parametrize("name", sorted(TARGETS))
@torch.inference_mode()
def test_a_targets_rows_have_the_bits_of_one_token_steps(name, tmp_path):
    """The property greedy parity rests on: a verify pass's rows equal one-token steps'."""
    model = as_cpu_target(TARGETS[name](tmp_path))
    together, steps = block_and_steps(model, PROMPT, torch.tensor([[7, 40, 2, 2, 61, 13, 5, 30, 1]]))
    assert torch.equal(together, steps)


@pytest.mark.parametrize("name", sorted(TARGETS))
@pytest.mark.parametrize("gamma", (1, 3, 8))
def test_greedy_speculative_equals_plain_with_a_target_through_them(name, gamma, tmp_path):
    target = as_cpu_target(TARGETS[name](tmp_path))
    assert accepted_with_greedy_parity(target, noisy_copy(target, 0.2, seed=7), gamma) > 0


@torch.inference_mode()
def test_a_copy_of_a_target_runs_its_own_weights(tmp_path):
    original = as_cpu_target(mixed_target(tmp_path))
    before = block_and_steps(original, PROMPT, torch.tensor([[7, 40]]))[1]
    clone = copy.deepcopy(original)
    assert torch.equal(block_and_steps(clone, PROMPT, torch.tensor([[7, 40]]))[1], before)
    clone.model.layers[0].self_attn.o_proj.d.mul_(2.0)  # the copy's Q4_K scales only
    assert not torch.equal(block_and_steps(clone, PROMPT, torch.tensor([[7, 40]]))[1], before)
    assert torch.equal(block_and_steps(original, PROMPT, torch.tensor([[7, 40]]))[1], before)
