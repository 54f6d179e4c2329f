"""A q4k drafter (`--draft-dtype q4k`): any drafter's decoder layers as Q4_K blocks that
specbench quantizes (gguf_blocks.quantize_q4k), run by the same kernel as a q4k target.

What must hold: the blocks stand for the weight (exactly where the weight lies on a Q4_K
grid, closely otherwise), a width that is not a multiple of 256 runs as if zero-padded
(test_lean_step.py: the draft step stacks q4k rows like int8 ones), and a q4k drafter
keeps speculative decoding lossless (greedy parity with a float32 target) while its drafts
are still accepted. The tests skip where the AVX2 kernel is not built.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import accepted_with_greedy_parity, tiny_model
from gguf_tiny import q4k_reference as reference
from tiny_hf import save_tiny

from specbench.models.model import load_model
from specbench.models.specs import parse_model_spec
from specbench.speed.draft_vocab import full_head_logits, restricted_head
from specbench.speed.gguf_blocks import QK, Q4KLinear, dequantize, q4k_linear, quantize_q4k
from specbench.speed.quantize import Int8Linear, fast_int8_linear, quantize_linears

needs_kernel = pytest.mark.needs_kernel("q4k")


def test_a_weight_on_the_q4k_grid_comes_back_bit_for_bit():
    """Sub-blocks of the 16 levels unit * (q - 5): d = unit / 63 and dmin = 5 * unit / 63
    are float16 values, so sc = m = 63 and every q are found exactly."""
    unit = 63 * 2.0**-10
    generator = torch.Generator().manual_seed(0)
    levels = torch.stack([torch.randperm(16, generator=generator) for _ in range(3 * 2 * 8 * 2)]).float()
    weight = (unit * (levels - 5)).reshape(3, 2 * QK)
    blocks = quantize_q4k(weight)
    assert torch.equal(dequantize(**blocks), weight)
    assert int(blocks["sm"].max()) == 63


def test_quantized_blocks_stay_close_to_any_weight():
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(40, 896, generator=generator) * torch.logspace(-3, 1, 40)[:, None]
    weight[7] = 0.0
    back = dequantize(**quantize_q4k(weight))
    assert back.shape == (40, 4 * QK) and torch.equal(back[:, 896:], torch.zeros(40, 4 * QK - 896))
    error = (back[:, :896] - weight).norm(dim=1) / weight.norm(dim=1).clamp(min=1e-30)
    assert error.max() < 0.1  # 4 bits: about 8% of a Gaussian row
    assert torch.equal(back[7], torch.zeros(4 * QK))


@needs_kernel
@pytest.mark.parametrize("width", [32, 300, 896])
def test_a_width_short_of_256_columns_runs_as_if_zero_padded(width):
    generator = torch.Generator().manual_seed(width)
    blocks = quantize_q4k(torch.randn(9, width, generator=generator))
    bias = torch.randn(9, generator=generator)
    layer, padded = Q4KLinear(blocks, bias, width), Q4KLinear(blocks, bias)
    x = torch.randn(5, width, generator=generator)
    assert torch.equal(layer(x), reference(F.pad(x, (0, padded.in_features - width)), padded))
    with pytest.raises(ValueError, match=f"{width} inputs got {width + 1}"):
        layer(torch.randn(1, width + 1))
    with pytest.raises(ValueError, match="cannot hold"):
        Q4KLinear(blocks, bias, padded.in_features + 1)


@needs_kernel
@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_speculative_equals_plain_with_a_q4k_drafter(tmp_path, gamma):
    target = tiny_model(0)
    drafter = load_model(parse_model_spec(str(save_tiny(tmp_path / "tiny", seed=0))), role="drafter", dtype="q4k").model
    assert isinstance(drafter.model.layers[1].mlp.down_proj, Q4KLinear) and isinstance(drafter.lm_head, Int8Linear)
    assert drafter.lm_head.q4k_rows()["d"].shape[0] == drafter.config.vocab_size  # its head's rows as blocks too
    assert (
        accepted_with_greedy_parity(target, drafter, gamma) > 0
    )  # the target's own weights, in 4 bits: drafts still land


@needs_kernel
@pytest.mark.needs_kernel("torch-int8")
def test_a_q4k_drafters_head_scores_its_first_rows_through_blocks_the_same_bits_every_way():
    torch.manual_seed(0)
    drafter = tiny_model(0).to(torch.bfloat16)
    weight = drafter.lm_head.weight.detach().clone()
    quantize_linears(drafter)
    head = drafter.lm_head
    head.hold_q4k_rows(quantize_q4k(weight[:24]))  # ids 0..23 as Q4_K blocks, the rest int8 only
    with torch.no_grad():
        hidden = torch.randn(1, drafter.config.hidden_size)
        rows = hidden.to(torch.bfloat16)
        full = full_head_logits(drafter, hidden)
        blocks = Q4KLinear(quantize_q4k(weight[:24]), None, weight.shape[1])
        assert torch.equal(full[:, :24], q4k_linear(rows, blocks))
        assert torch.equal(full[:, 24:], fast_int8_linear(rows, head.qweight[24:], head.scales[24:], None))
        # limit 10: every first id through views of the blocks; limit 40: split where they end;
        # added ids (copies) on both sides of 24
        for limit, extra in ((10, [40, 12]), (40, [50, 5])):
            restricted = restricted_head(drafter, limit, extra)
            restricted.add(torch.tensor([20, 60]))
            assert restricted.first[0].q4k.qs.data_ptr() == head.q4k_rows()["qs"].data_ptr()
            logits, ids = restricted(hidden), restricted.ids
            assert torch.equal(logits[:, ids], full[:, ids])  # the same bits as the whole head
            left_out = torch.ones(full.shape[-1], dtype=torch.bool)
            left_out[ids] = False
            assert (logits[:, left_out] == torch.finfo(logits.dtype).min).all()
        assert [part.q4k is not None for part in restricted.first] == [True, False]
    assert head(rows).shape == full.shape  # HF's forward keeps the int8 rows
    assert accepted_with_greedy_parity(tiny_model(0), drafter, 3) > 0
