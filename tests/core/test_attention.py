"""Row-invariant attention (core.attention): a verify forward's rows get the bits of one-row steps.

Head dims of 32 and more matter here: with the test fixtures' head dim of 8, PyTorch's fused
attention happened to give one row the same bits alone and in a block, and hid the problem
the real pair showed (a one-row and a four-row forward differing in the last bits of every
logit, enough to flip a near tie).
"""

from __future__ import annotations

import pytest
import torch
from conftest import PROMPTS, block_and_steps, noisy_copy, tiny_model
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from specbench.core.attention import ROWS, mask_ranges, row_invariant_attention, use_row_invariant_attention
from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
from specbench.drafters import ModelDrafter
from specbench.policies import FixedGamma
from specbench.speed.quantize import quantize_target

needs_kernel = pytest.mark.needs_kernel("linear")


class Heads(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


def causal_mask(rows: int, keys: int, window: int | None = None) -> torch.Tensor:
    """[1, 1, rows, keys]: the last `rows` positions of `keys`, each seeing itself and before."""
    position = torch.arange(keys - rows, keys)[:, None]
    key = torch.arange(keys)[None, :]
    seen = key <= position
    if window is not None:
        seen &= key > position - window
    return seen[None, None]


# ---------------------------------------------------------------------------- the ranges


def test_mask_ranges_reads_causal_and_sliding_window_rows():
    assert mask_ranges(causal_mask(3, 7)[0, 0]) == [(0, 5), (0, 6), (0, 7)]
    assert mask_ranges(causal_mask(3, 7, window=4)[0, 0]) == [(1, 5), (2, 6), (3, 7)]


def test_mask_ranges_refuses_holes_and_empty_rows():
    holed = causal_mask(2, 6)[0, 0].clone()
    holed[1, 2] = False
    assert mask_ranges(holed) is None
    empty = causal_mask(2, 6)[0, 0].clone()
    empty[0] = False
    assert mask_ranges(empty) is None


# ---------------------------------------------------------------------------- the function


@pytest.mark.parametrize("window", [None, 20])
def test_each_row_equals_a_one_row_step_at_its_position(window):
    torch.manual_seed(0)
    keys, rows, dim = 90, 5, 64
    query = torch.randn(1, 6, rows, dim)
    key, value = torch.randn(1, 2, keys, dim), torch.randn(1, 2, keys, dim)
    together, _ = row_invariant_attention(
        Heads(), query, key, value, causal_mask(rows, keys, window), scaling=dim**-0.5
    )
    for i in range(rows):
        seen = keys - rows + i + 1  # a decoding step at this position has these keys in its cache
        start = 0 if window is None else max(0, seen - window)
        step_mask = None if start == 0 else causal_mask(1, seen, window)
        alone, _ = row_invariant_attention(
            Heads(), query[:, :, i : i + 1], key[:, :, :seen], value[:, :, :seen], step_mask, scaling=dim**-0.5
        )
        assert torch.equal(together[:, i], alone[:, 0]), i


def test_it_computes_what_sdpa_computes():
    torch.manual_seed(1)
    query, key, value = torch.randn(1, 6, 4, 32), torch.randn(1, 2, 50, 32), torch.randn(1, 2, 50, 32)
    mask = causal_mask(4, 50)
    ours, _ = row_invariant_attention(Heads(), query, key, value, mask, scaling=0.2)
    fused, _ = sdpa_attention_forward(Heads(), query, key, value, mask, scaling=0.2)
    torch.testing.assert_close(ours, fused)


@pytest.mark.parametrize(
    "case",
    ["prefill", "float mask", "batch", "holes"],
)
def test_what_rows_cannot_express_goes_to_the_fused_call(case):
    torch.manual_seed(2)
    batch, rows, keys = (2 if case == "batch" else 1), 3, (3 if case == "prefill" else 40)
    query, key, value = (
        torch.randn(batch, 6, rows, 32),
        torch.randn(batch, 2, keys, 32),
        torch.randn(batch, 2, keys, 32),
    )
    mask = causal_mask(rows, keys).expand(batch, 1, rows, keys).clone()
    if case == "prefill":
        mask = None
    if case == "float mask":
        mask = torch.zeros(1, 1, rows, keys).masked_fill(~causal_mask(rows, keys), float("-inf"))
    if case == "holes":
        mask[0, 0, 2, 5] = False
    ours, _ = row_invariant_attention(Heads(), query, key, value, mask, scaling=0.2)
    fused, _ = sdpa_attention_forward(Heads(), query, key, value, mask, scaling=0.2)
    assert torch.equal(ours, fused)


# ---------------------------------------------------------------------------- a model


def wide_model(seed: int = 0):
    """A tiny Qwen2 with head dim 32 (where fused attention is not row-invariant)."""
    return tiny_model(seed, hidden=128, max_positions=512)


def test_use_switches_sdpa_models_and_leaves_others():
    model = wide_model()
    assert use_row_invariant_attention(model) and model.config._attn_implementation == ROWS
    assert use_row_invariant_attention(model)  # a second call keeps it
    eager = wide_model()
    eager.set_attn_implementation("eager")
    assert not use_row_invariant_attention(eager) and eager.config._attn_implementation == "eager"


@needs_kernel
def test_an_int8_target_verifies_k_tokens_with_the_bits_of_k_steps():
    """With int8 linears (exact) and these rows, the whole forward is row-invariant."""
    model = wide_model()
    quantize_target(model)
    use_row_invariant_attention(model)
    prompt, tail = torch.randint(0, 64, (1, 150)), torch.randint(0, 64, (1, 6))
    together, steps = block_and_steps(model, prompt, tail)
    assert torch.equal(together, steps)


@needs_kernel
@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_speculative_equals_plain_with_a_wide_int8_target(gamma):
    target = wide_model()
    quantize_target(target)
    use_row_invariant_attention(target)
    drafter = noisy_copy(wide_model(), 0.2, seed=7)
    config = GenerationConfig(max_new_tokens=40)
    for prompt in PROMPTS:
        result = speculative_generate(target, ModelDrafter(drafter), prompt, config, FixedGamma(gamma))
        assert result.token_ids == plain_generate(target, prompt, config).token_ids
