"""The lean draft-step forward (lean_step.py) computes what HF's decoder computes: the same
hidden states and the same cache, for 1..MAX_LEAN_ROWS new tokens, on tiny Qwen2 and Llama
models, in fp32 and with int8 or q4k layers (whose q/k/v and gate/up rows it stacks; there it attends
in float32 where HF attends in bf16, so the two agree to bf16 rounding); and a float32
target's forward over a cache runs it and gives the model's own forward's bits."""

import inspect

import pytest
import torch
from conftest import accepted_with_greedy_parity, as_cpu_target, noisy_copy, tiny_model
from gguf_tiny import quantize_to_q4k
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from specbench.core.attention import use_row_invariant_attention
from specbench.core.cache import cache_arg, crop_cache, new_cache
from specbench.speed.lean_step import MAX_LEAN_ROWS, LeanDecoder, lean_call, lean_decoder, supports, use_lean_forward
from specbench.speed.quantize import int8_available, quantize_linears

pytestmark = pytest.mark.usefixtures("single_thread")


def tiny_llama(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
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
if int8_available():
    MODELS["qwen2 q4k"] = lambda: q4k_qwen2(4)
NEEDS = {"qwen2 q4k": pytest.mark.needs_kernel("q4k")}


def cases(names) -> list:
    """names as parameters, each marked with the kernel it needs (NEEDS)."""
    return [pytest.param(name, marks=NEEDS.get(name, ())) for name in sorted(names)]


@pytest.mark.parametrize("name", cases(MODELS))
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
        expected = model.get_decoder()(
            input_ids=new, **cache_arg(model.get_decoder(), theirs), use_cache=True
        ).last_hidden_state
        got = decoder(new, mine)
        # bf16 (int8, q4k) models: the lean forward attends in float32, HF in bf16, so later layers differ by rounding
        tolerance = {"rtol": 1e-2, "atol": 1e-2} if name.endswith(("int8", "q4k")) else {"rtol": 1e-5, "atol": 1e-5}
        torch.testing.assert_close(got, expected, **tolerance)
        for a, b in zip(theirs.layers, mine.layers):
            torch.testing.assert_close(b.keys, a.keys, **tolerance)
            torch.testing.assert_close(b.values, a.values, **tolerance)
        for cache in (theirs, mine):
            crop_cache(cache, prompt.shape[1])
    more = torch.zeros(1, MAX_LEAN_ROWS + 1, dtype=torch.long)
    if decoder.fused is None:
        with pytest.raises(ValueError, match="at most"):
            decoder(more, mine)
    else:  # native layers take any number of rows (test_fused_step.py: each with a one-row step's bits)
        assert decoder(more, mine).shape[1] == MAX_LEAN_ROWS + 1


STACKED = {  # a layer's weight buffer, and the stacked one of layer 0's q/k/v
    "qwen2 int8": (lambda layer: layer.qweight, lambda decoder: decoder.qkv[0].packed[0]),
    "qwen2 q4k": (lambda layer: layer.qs, lambda decoder: decoder.qkv[0].q4k.qs),
}


@pytest.mark.parametrize("name", cases(set(STACKED) & set(MODELS)))
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
    sliding = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        use_sliding_window=True,
        sliding_window=4,
        max_window_layers=0,
    )
    assert not supports(Qwen2ForCausalLM(sliding))
    assert not supports(torch.nn.Linear(2, 2))
    assert supports(tiny_model(0)) and supports(tiny_llama(0))


def test_a_model_off_the_cpu_has_no_lean_decoder():
    """The lean forward is a CPU path, asked at each call: the same model gets a decoder on
    the CPU and none once moved elsewhere (the meta device stands in for a GPU here)."""
    model = tiny_model(0)
    assert isinstance(lean_decoder(model), LeanDecoder)
    assert lean_decoder(model.to("meta")) is None


@pytest.mark.needs_kernel("torch-int8", "linear")
@torch.inference_mode()
def test_rows_fed_together_over_a_cache_get_the_bits_of_one_row_steps():
    """A round's catch-up (several rows over the cache) must compute each row as a one-row
    step does, so the sweep's profile, which feeds one token a step, predicts real rounds.
    Head dim 32 and a long cache: where fused attention rounds a block unlike single rows."""
    model = tiny_model(3, hidden=128, max_positions=512).to(torch.bfloat16)
    quantize_linears(model)
    decoder = lean_decoder(model)
    generator = torch.Generator().manual_seed(0)
    prompt, tail = (
        torch.randint(0, 64, (1, 150), generator=generator),
        torch.randint(0, 64, (1, MAX_LEAN_ROWS), generator=generator),
    )
    together, alone = new_cache(model), new_cache(model)
    for cache in (together, alone):
        model.get_decoder()(input_ids=prompt, **cache_arg(model.get_decoder(), cache), use_cache=True)
    block = decoder(tail, together)
    steps = torch.cat([decoder(tail[:, i : i + 1], alone) for i in range(tail.shape[1])], dim=1)
    assert torch.equal(block, steps)


# ---------------------------------------------------------------------------- the target's forward


# float32 targets; a q4k or int8 target's layers run fused_step.py's native calls (test_fused_step.py)
TARGETS = {"qwen2": lambda: tiny_model(5), "llama": lambda: tiny_llama(6)}


@pytest.mark.parametrize("name", sorted(TARGETS))
@torch.inference_mode()
def test_a_target_forward_over_a_cache_runs_lean_and_gives_the_models_own_bits(name, monkeypatch):
    model = as_cpu_target(TARGETS[name]())
    own = model.forward.own
    lean_calls = []
    decoder_call = LeanDecoder.__call__
    monkeypatch.setattr(
        LeanDecoder,
        "__call__",
        lambda self, ids, cache: lean_calls.append(ids.shape[1]) or decoder_call(self, ids, cache),
    )
    prompt = torch.tensor([[3, 14, 15, 9, 26, 5, 35, 8]])
    theirs, mine = new_cache(model), new_cache(model)
    for cache, forward in ((theirs, own), (mine, model)):
        forward(input_ids=prompt, **cache_arg(model, cache), use_cache=True)
    assert lean_calls == []  # the prompt's first forward is the model's own
    for n in (1, 2, 5, 9):
        new = (torch.arange(n).unsqueeze(0) * 7 + n) % 64
        expected = own(input_ids=new, **cache_arg(model, theirs), use_cache=True, logits_to_keep=n).logits
        got = model(input_ids=new, **cache_arg(model, mine), use_cache=True, logits_to_keep=n).logits
        assert torch.equal(got, expected)
        for a, b in zip(theirs.layers, mine.layers):
            assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    assert lean_calls == [1, 2, 5, 9]


@torch.inference_mode()
def test_calls_the_lean_forward_cannot_run_take_the_models_own():
    model = as_cpu_target(tiny_model(5))
    cache = new_cache(model)
    ids = torch.tensor([[1, 2, 3]])
    assert lean_call({"input_ids": ids, "cache": cache}) is None  # no cache yet: the prompt's first forward
    model(input_ids=ids, **cache_arg(model, cache), use_cache=True)
    one = torch.tensor([[4]])
    assert lean_call({"input_ids": one, "cache": cache, "logits_to_keep": 1}) == (one, cache, 1)
    assert (
        lean_call(
            {
                "input_ids": one,
                "past_key_values": cache,
                "attention_mask": torch.ones(1, 4),
                "position_ids": torch.tensor([[3]]),
            }
        )
        is not None
    )
    refused = [
        {"attention_mask": torch.tensor([[0, 1, 1, 1]])},  # padding
        {"position_ids": torch.tensor([[7]])},  # positions that do not follow the cache
        {"output_attentions": True},
        {"inputs_embeds": torch.zeros(1, 1, 32)},
        {"logits_to_keep": torch.tensor([0])},
        {"use_cache": False},
    ]
    for extra in refused:
        assert lean_call({"input_ids": one, "cache": cache, **extra}) is None, extra
    assert lean_call({"input_ids": torch.tensor([[4], [5]]), "cache": cache}) is None  # a batch
    attentions = model(input_ids=one, **cache_arg(model, cache), use_cache=True, output_attentions=True).attentions
    assert attentions is not None  # the model's own forward answered


def test_the_lean_forward_is_installed_only_where_it_gives_the_same_bits():
    eager = tiny_model(5)
    eager.set_attn_implementation("eager")
    assert not use_lean_forward(eager) and "forward" not in eager.__dict__  # its rows attend differently
    half = tiny_model(5).to(torch.bfloat16)
    use_row_invariant_attention(half)
    assert not use_lean_forward(half)  # the lean forward attends bf16 in float32
    model = as_cpu_target(tiny_model(5))
    installed = model.forward
    assert use_lean_forward(model) and model.forward is installed  # never wrapped twice
    assert "logits_to_keep" in inspect.signature(model.forward).parameters  # HF's generate reads it


@torch.inference_mode()
def test_early_exit_and_hf_generate_run_through_the_lean_forward():
    from specbench.drafters.early_exit import exit_after

    model = as_cpu_target(tiny_model(5, layers=3))
    prompt, new = torch.tensor([[3, 14, 15, 9]]), torch.tensor([[26, 5]])
    results = []
    for forward, layers in ((model.forward.own, 1), (model, 1), (model, 3)):
        cache = new_cache(model)
        with exit_after(model, layers):
            forward(input_ids=prompt, **cache_arg(model, cache), use_cache=True)
            results.append(forward(input_ids=new, **cache_arg(model, cache), use_cache=True).logits)
    assert torch.equal(results[0], results[1])  # one layer, lean or not
    assert not torch.equal(results[1], results[2])  # and it did stop after one
    generated = model.generate(prompt, max_new_tokens=12, do_sample=False)
    del model.__dict__["forward"]  # the model's own forward again
    assert torch.equal(generated, model.generate(prompt, max_new_tokens=12, do_sample=False))


@pytest.mark.parametrize("gamma", (1, 3, 8))
def test_greedy_speculative_equals_plain_through_the_lean_forward(gamma):
    target = as_cpu_target(tiny_model(0, layers=2, hidden=32))
    assert accepted_with_greedy_parity(target, noisy_copy(target, 0.2, seed=7), gamma) > 0
