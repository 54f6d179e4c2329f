"""Cache rollback against the installed transformers version."""

import pytest
import torch
import transformers

from specbench.core.cache import cache_length, crop_cache, new_cache
from conftest import tiny_model


def test_crop_then_refeed_matches_a_fresh_run():
    """Guards the 5.x crop API change: a wrong crop leaves stale keys and changes the logits."""
    model = tiny_model(0)
    ids = torch.tensor([[3, 8, 1, 9, 4, 4, 7, 2, 5, 6]])
    with torch.no_grad():
        cache = new_cache(model)
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        assert cache_length(cache) == 10
        crop_cache(cache, 6)
        assert cache_length(cache) == 6
        other = torch.tensor([[11, 12, 13]])
        rolled = model(input_ids=other, past_key_values=cache, use_cache=True).logits
        fresh = model(input_ids=torch.cat([ids[:, :6], other], 1), use_cache=False).logits[:, 6:]
    assert torch.allclose(rolled, fresh, atol=1e-5), transformers.__version__


def test_crop_to_same_length_is_a_no_op_and_growing_is_an_error():
    model = tiny_model(0)
    cache = new_cache(model)
    with torch.no_grad():
        model(input_ids=torch.tensor([[1, 2, 3]]), past_key_values=cache, use_cache=True)
    crop_cache(cache, 3)
    assert cache_length(cache) == 3
    with pytest.raises(ValueError):
        crop_cache(cache, 4)
