"""Weight-only int8 drafter layers: the quantization rule, the one-row int8 kernel against the
dequantized dense layer, prompts through the native kernel or the dense twin, and decoding
with an int8 drafter staying lossless. (The int8 target: test_int8_target.py.)"""

import pytest
import torch
from conftest import PROMPTS, noisy_copy, tiny_model

from specbench.bench.meta import model_meta
from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
from specbench.drafters import ModelDrafter, make_drafter
from specbench.errors import ModelError
from specbench.models.dtypes import parse_draft_dtype, parse_dtype, parse_target_dtype, resolve_draft_dtype
from specbench.models.loading import PairConfig
from specbench.policies import FixedGamma
from specbench.speed import draft_vocab, native
from specbench.speed.draft_vocab import restricted_head
from specbench.speed.quantize import (
    MAX_INT8_ROWS,
    Int8Linear,
    dense_twin,
    dequantize_rows,
    int8_available,
    native_int8_linear,
    quantize_linears,
    quantize_rows,
)

needs_int8 = pytest.mark.skipif(not int8_available(), reason="no int8 weight-only kernel in this torch")


def test_quantize_rows_rounds_each_row_to_its_own_scale():
    weight = torch.tensor([[1.0, -0.5, 0.25], [100.0, 50.0, -100.0]])
    q, scales = quantize_rows(weight)
    assert q.dtype == torch.int8 and q[0, 0] == 127 and q[1, 2] == -127
    assert torch.allclose(scales.float(), torch.tensor([1.0, 100.0]) / 127, rtol=1e-2)
    error = (dequantize_rows(q, scales).float() - weight).abs()
    assert (error <= scales.float()[:, None] * 0.51 + 1e-2 * weight.abs()).all()


@needs_int8
def test_few_rows_run_the_int8_kernel_and_match_the_dequantized_layer():
    torch.manual_seed(0)
    layer = Int8Linear(torch.nn.Linear(64, 96, dtype=torch.bfloat16))
    dense = dense_twin(layer.qweight, layer.scales, layer.bias)
    with torch.no_grad():
        for n in range(1, MAX_INT8_ROWS + 1):
            few = torch.randn(1, n, 64, dtype=torch.bfloat16)
            fast = layer(few)
            assert fast.shape == (1, n, 96)
            assert torch.allclose(fast.float(), dense(few).float(), rtol=2e-2, atol=2e-2)
            expected = torch._weight_int8pack_mm(few.reshape(n, 64), layer.qweight, layer.scales) + layer.bias
            assert torch.equal(fast.reshape(n, 96), expected)


@needs_int8
def test_many_rows_run_the_native_kernel_or_the_dense_twin():
    """A prompt's rows: int8_linear.c where it is built (no dense copy kept), else the twin."""
    torch.manual_seed(0)
    layer = Int8Linear(torch.nn.Linear(64, 96, dtype=torch.bfloat16))
    many = torch.randn(1, MAX_INT8_ROWS + 1, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        if native.linear_kernel() is not None:
            assert layer.dense is None
            assert torch.equal(layer(many), native_int8_linear(many, layer.qweight, layer.scales, layer.bias))
            twin = dense_twin(layer.qweight, layer.scales, layer.bias)
            assert torch.allclose(layer(many).float(), twin(many).float(), rtol=2e-2, atol=2e-2)
        else:
            assert torch.equal(layer(many), layer.dense(many))


@needs_int8
def test_without_the_native_kernel_a_layer_keeps_its_dense_twin(monkeypatch):
    monkeypatch.setattr(native, "linear_kernel", lambda: None)
    torch.manual_seed(0)
    layer = Int8Linear(torch.nn.Linear(64, 96, dtype=torch.bfloat16))
    many = torch.randn(1, MAX_INT8_ROWS + 1, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        assert layer.dense is not None and torch.equal(layer(many), layer.dense(many))


@needs_int8
def test_an_int8_drafter_keeps_greedy_parity():
    target = tiny_model(0)
    drafter = noisy_copy(target, 0.2, seed=7).to(torch.bfloat16)
    assert quantize_linears(drafter) == 2 * 7 + 1
    config = GenerationConfig(max_new_tokens=30)
    accepted = 0
    for prompt in PROMPTS:
        result = speculative_generate(target, ModelDrafter(drafter), prompt, config, FixedGamma(4))
        assert result.token_ids == plain_generate(target, prompt, config).token_ids
        accepted += result.stats.accepted
    assert accepted > 0


def test_int8_runs_on_the_cpu_only():
    with pytest.raises(ModelError, match="unknown dtype"):
        parse_dtype("int4")
    with pytest.raises(ModelError, match="CPU only"):
        parse_draft_dtype("int8", "cuda")
    with pytest.raises(ModelError, match="CPU only"):
        parse_target_dtype("int8", "cuda")
    assert parse_draft_dtype("bf16", "cpu") == torch.bfloat16


def test_auto_drafter_dtype_is_q4k_then_int8_on_the_cpu_and_bf16_elsewhere(monkeypatch):
    from specbench.speed import native

    expected_cpu = ("q4k" if native.q4k_kernel() is not None else "int8") if int8_available() else "bfloat16"
    assert resolve_draft_dtype("auto", "cpu") == expected_cpu
    assert PairConfig().draft_dtype == expected_cpu  # the default is auto, resolved on creation
    assert resolve_draft_dtype("auto", "cuda") == resolve_draft_dtype("auto", "auto") == "bfloat16"
    assert PairConfig(device="cuda:1").draft_dtype == "bfloat16"
    assert resolve_draft_dtype("float32", "cpu") == "float32"  # named dtypes pass through
    monkeypatch.setattr("specbench.models.dtypes.q4k_why_not", lambda: "no AVX2")
    assert resolve_draft_dtype("auto", "cpu") == ("int8" if int8_available() else "bfloat16")  # no Q4_K kernel
    monkeypatch.setattr("specbench.models.dtypes.int8_available", lambda: False)
    assert resolve_draft_dtype("auto", "cpu") == "bfloat16"  # a torch without the int8 kernel


@needs_int8
def test_a_sweep_records_an_int8_drafter_as_int8():
    drafter = tiny_model(0).to(torch.bfloat16)
    assert model_meta(drafter, "d")["dtype"] == "bfloat16"
    quantize_linears(drafter)
    assert model_meta(drafter, "d")["dtype"] == "int8"


@needs_int8
def test_a_restricted_head_over_an_int8_drafter_scores_through_its_int8_rows():
    torch.manual_seed(0)
    drafter = tiny_model(0).to(torch.bfloat16)
    quantize_linears(drafter)
    head = restricted_head(drafter, 10, [40])
    assert head is not None and head.int8 is drafter.lm_head
    head.add(torch.tensor([50, 3]))  # 50 is new: it goes into the small second part
    ids = head.ids
    assert ids.tolist() == [*range(10), 40, 50]
    # ids 0..9 are views of the head's first int8 rows; no dequantized rows until a call needs them
    assert head.first[0].packed[0].data_ptr() == drafter.lm_head.qweight.data_ptr()
    assert head.first[0].weight is None and head.added[0].weight is None
    with torch.no_grad():
        for n in (1, MAX_INT8_ROWS, MAX_INT8_ROWS + 1):
            hidden = torch.randn(n, drafter.config.hidden_size, dtype=torch.bfloat16)
            logits, full = head(hidden), drafter.lm_head(hidden)  # n rows: int8 kernel or dense twin, as the full head
            torch.testing.assert_close(logits[:, ids], full[:, ids], rtol=1e-2, atol=1e-2)
            assert (logits[:, 20] == torch.finfo(torch.bfloat16).min).all()  # an id left out
    assert head.first[0].weight is not None  # made for the call of MAX_INT8_ROWS + 1 rows


@needs_int8
def test_an_int8_drafter_with_a_restricted_head_keeps_greedy_parity(monkeypatch):
    target = tiny_model(0)
    drafter = noisy_copy(target, 0.2, seed=7).to(torch.bfloat16)
    quantize_linears(drafter)
    head_rows = []  # output rows of each int8 call through a restricted head
    real = draft_vocab.fast_int8_linear
    monkeypatch.setattr(
        draft_vocab, "fast_int8_linear", lambda x, q, *rest: head_rows.append(q.shape[0]) or real(x, q, *rest)
    )
    config = GenerationConfig(max_new_tokens=30)
    accepted = 0
    for prompt in PROMPTS:
        result = speculative_generate(
            target, make_drafter("model", drafter, vocab_limit=16), prompt, config, FixedGamma(4)
        )
        assert result.token_ids == plain_generate(target, prompt, config).token_ids
        accepted += result.stats.accepted
    assert accepted > 0
    assert (
        head_rows and min(head_rows) < drafter.config.vocab_size
    )  # drafts were scored by int8 kept rows (the whole head once it is dropped)
