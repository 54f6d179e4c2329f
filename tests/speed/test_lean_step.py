"""The lean draft-step forward (lean_step.py) computes what HF's decoder computes: the same
hidden states and the same cache, for 1..MAX_LEAN_ROWS new tokens, on tiny Qwen2 and Llama
models, in fp32 and with int8 or q4k layers (whose q/k/v and gate/up rows it stacks; there it attends
in float32 where HF attends in bf16, so the two agree to bf16 rounding)."""

import pytest
import torch
from conftest import tiny_model
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from specbench.core.cache import cache_arg, crop_cache, new_cache
from specbench.speed.lean_step import MAX_LEAN_ROWS, lean_decoder, supports
from specbench.speed import native
from specbench.speed.gguf_blocks import quantize_to_q4k
from specbench.speed.quantize import int8_available, quantize_linears

pytestmark = pytest.mark.usefixtures("single_thread")


def tiny_llama(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(config).eval()


def int8_qwen2(seed: int) -> Qwen2ForCausalLM:
    model = tiny_model(seed).to(torch.bfloat16)
    quantize_linears(model)
    return model


def q4k_qwen2(seed: int) -> Qwen2ForCausalLM:
    model = tiny_model(seed).to(torch.bfloat16)
    quantize_to_q4k(model)
    quantize_linears(model)  # the head
    return model


MODELS = {"qwen2": lambda: tiny_model(0), "llama": lambda: tiny_llama(1)}
if int8_available():
    MODELS["qwen2 int8"] = lambda: int8_qwen2(2)
if int8_available() and native.q4k_kernel() is not None:
    MODELS["qwen2 q4k"] = lambda: q4k_qwen2(4)


@pytest.mark.parametrize("name", sorted(MODELS))
@torch.inference_mode()
def test_lean_forward_matches_hf_hidden_states_and_cache(name):
    model = MODELS[name]()
    decoder = lean_decoder(model)
    assert decoder is not None
    prompt = torch.tensor([[3, 14, 15, 9, 26, 5, 35, 8]])
    theirs, mine = new_cache(model), new_cache(model)
    for cache in (theirs, mine):
        model.get_decoder()(input_ids=prompt, **cache_arg(model.get_decoder(), cache), use_cache=True)
    for n in range(1, MAX_LEAN_ROWS + 1):
        new = torch.arange(n).unsqueeze(0) * 7 % 64
        expected = model.get_decoder()(input_ids=new, **cache_arg(model.get_decoder(), theirs), use_cache=True).last_hidden_state
        got = decoder(new, mine)
        # bf16 (int8, q4k) models: the lean forward attends in float32, HF in bf16, so later layers differ by rounding
        tolerance = {"rtol": 1e-2, "atol": 1e-2} if name.endswith(("int8", "q4k")) else {"rtol": 1e-5, "atol": 1e-5}
        torch.testing.assert_close(got, expected, **tolerance)
        for a, b in zip(theirs.layers, mine.layers):
            torch.testing.assert_close(b.keys, a.keys, **tolerance)
            torch.testing.assert_close(b.values, a.values, **tolerance)
        for cache in (theirs, mine):
            crop_cache(cache, prompt.shape[1])
    with pytest.raises(ValueError, match="at most"):
        decoder(torch.zeros(1, MAX_LEAN_ROWS + 1, dtype=torch.long), mine)


STACKED = {  # a layer's weight buffer, and the stacked one of layer 0's q/k/v
    "qwen2 int8": (lambda layer: layer.qweight, lambda decoder: decoder.qkv[0].packed[0]),
    "qwen2 q4k": (lambda layer: layer.qs, lambda decoder: decoder.qkv[0].q4k.qs),
}


@pytest.mark.parametrize("name", sorted(set(STACKED) & set(MODELS)))
@torch.inference_mode()
def test_stacking_rows_leaves_hf_forward_unchanged_and_adds_no_memory(name):
    model = MODELS[name]()
    weight, stacked_weight = STACKED[name]
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    before = model(input_ids=ids).logits
    decoder = lean_decoder(model)
    attn = model.model.layers[0].self_attn
    stacked = stacked_weight(decoder)
    assert weight(attn.q_proj).data_ptr() == stacked.data_ptr()  # q's rows are a view of the stack
    assert weight(attn.k_proj).untyped_storage().data_ptr() == stacked.untyped_storage().data_ptr()
    assert torch.equal(model(input_ids=ids).logits, before)
    assert lean_decoder(model) is decoder  # built once per model


def test_other_layouts_take_hf_forward():
    sliding = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True, sliding_window=4, max_window_layers=0)
    assert not supports(Qwen2ForCausalLM(sliding))
    assert not supports(torch.nn.Linear(2, 2))
    assert supports(tiny_model(0)) and supports(tiny_llama(0))


@pytest.mark.skipif(not int8_available() or native.linear_kernel() is None, reason="needs PyTorch's int8 weight-only kernel and specbench's int8 kernel")
@torch.inference_mode()
def test_rows_fed_together_over_a_cache_get_the_bits_of_one_row_steps():
    """A round's catch-up (several rows over the cache) must compute each row as a one-row
    step does, so the sweep's profile, which feeds one token a step, predicts real rounds.
    Head dim 32 and a long cache: where fused attention rounds a block unlike single rows."""
    model = tiny_model(3, hidden=128, max_positions=512).to(torch.bfloat16)
    quantize_linears(model)
    decoder = lean_decoder(model)
    generator = torch.Generator().manual_seed(0)
    prompt, tail = torch.randint(0, 64, (1, 150), generator=generator), torch.randint(0, 64, (1, MAX_LEAN_ROWS), generator=generator)
    together, alone = new_cache(model), new_cache(model)
    for cache in (together, alone):
        model.get_decoder()(input_ids=prompt, **cache_arg(model.get_decoder(), cache), use_cache=True)
    block = decoder(tail, together)
    steps = torch.cat([decoder(tail[:, i : i + 1], alone) for i in range(tail.shape[1])], dim=1)
    assert torch.equal(block, steps)
