"""The oneDNN kernel swap changes speed, not results."""

import copy

import pytest
import torch
from conftest import PROMPTS, noisy_copy, tiny_model

from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
from specbench.drafters import ModelDrafter
from specbench.policies import FixedGamma
from specbench.speed.kernels import HybridLinear, onednn_available, stock_kernels, use_kernels

pytestmark = pytest.mark.skipif(not onednn_available(), reason="no oneDNN in this torch build")


def test_hybrid_linear_matches_dense_for_one_and_many_rows():
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 80)
    hybrid = HybridLinear(linear)
    with torch.no_grad():
        for rows in (1, 2, 5, 9):
            x = torch.randn(1, rows, 48)
            assert torch.allclose(hybrid(x), linear(x), atol=1e-5)


def test_fp32_one_row_runs_the_packed_weight():
    """fp32 layers run every row through oneDNN (one row measured faster than MKL's GEMV):
    zeroing the dense weight after packing leaves a one-row result unchanged."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 80)
    x = torch.randn(1, 1, 48)
    with torch.no_grad():
        want = linear(x)
        hybrid = HybridLinear(copy.deepcopy(linear))
        hybrid.weight.zero_()
        assert torch.allclose(hybrid(x), want, atol=1e-5)


def test_stock_kernels_run_the_dense_weight_for_every_row_count():
    """Inside stock_kernels() a swapped layer is PyTorch's own Linear again (here seen through a
    dense weight zeroed after packing); the switch is off again after the block, even on error."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 80)
    hybrid = HybridLinear(copy.deepcopy(linear))
    with torch.no_grad():
        hybrid.weight.zero_()
        for rows in (1, 5):
            x = torch.randn(1, rows, 48)
            with stock_kernels():
                assert torch.allclose(hybrid(x), hybrid.bias.expand(1, rows, 80))
            assert torch.allclose(hybrid(x), linear(x), atol=1e-5)
        with pytest.raises(RuntimeError), stock_kernels():
            raise RuntimeError("boom")
        assert torch.allclose(hybrid(x), linear(x), atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_hybrid_linear_agrees_to_half_rounding(dtype):
    """Up to HALF_ROWS rows run the half weight itself (bit for bit); more rows the packed
    fp32 copy, which agrees to half rounding."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 80, dtype=dtype)
    hybrid = HybridLinear(linear)
    assert HybridLinear.HALF_ROWS == 2  # a drafter's catch-up: its last draft and the bonus token
    with torch.no_grad():
        for rows in range(1, HybridLinear.HALF_ROWS + 1):
            few = torch.randn(1, rows, 48, dtype=dtype)
            assert torch.equal(hybrid(few), linear(few))
        for rows in (3, 5, 9):
            x = torch.randn(1, rows, 48, dtype=dtype)
            out = hybrid(x)
            assert out.dtype == dtype
            exact = torch.nn.functional.linear(x.float(), linear.weight.float(), linear.bias.float())
            assert torch.allclose(out.float(), exact, rtol=1e-2, atol=1e-2)
            assert not torch.equal(out, torch.zeros_like(out))


def test_swap_keeps_greedy_parity_and_baseline():
    target = tiny_model(0)
    drafter = noisy_copy(target, 0.2, seed=7)
    config = GenerationConfig(max_new_tokens=30)
    expected = {tuple(p): plain_generate(target, p, config).token_ids for p in PROMPTS}
    fast = copy.deepcopy(target)
    assert use_kernels(fast, "onednn") == 2 * 7 + 1  # 7 Linear per layer, 2 layers, lm_head
    for prompt in PROMPTS:
        assert plain_generate(fast, prompt, config).token_ids == expected[tuple(prompt)]
        result = speculative_generate(fast, ModelDrafter(drafter), prompt, config, FixedGamma(5))
        assert result.token_ids == expected[tuple(prompt)]


def test_unknown_kernels_is_an_error():
    with pytest.raises(ValueError, match="unknown kernels"):
        use_kernels(tiny_model(0), "fast")


def test_a_bf16_drafter_is_swapped_and_still_drafts_losslessly():
    target = tiny_model(0)
    drafter = noisy_copy(target, 0.2, seed=7).to(torch.bfloat16)
    assert use_kernels(drafter, "onednn") == 2 * 7 + 1
    config = GenerationConfig(max_new_tokens=30)
    for prompt in PROMPTS:
        expected = plain_generate(target, prompt, config).token_ids
        assert speculative_generate(target, ModelDrafter(drafter), prompt, config, FixedGamma(4)).token_ids == expected


def test_a_swapped_model_can_be_deep_copied():
    """A packed oneDNN tensor has no storage to copy; HybridLinear repacks its copy instead."""
    model = tiny_model(0)
    use_kernels(model, "onednn")
    clone = copy.deepcopy(model)
    half = copy.deepcopy(tiny_model(0).to(torch.bfloat16))
    use_kernels(half, "onednn")
    assert copy.deepcopy(half).lm_head.weight.dtype == torch.bfloat16
    x = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        assert torch.equal(clone(x).logits, model(x).logits)
