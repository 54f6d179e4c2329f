"""Cache rollback against the installed transformers version."""

import pytest
import torch
import transformers
from conftest import tiny_model

from specbench.core.cache import cache_arg, cache_length, crop_cache, new_cache


def test_crop_then_refeed_matches_a_fresh_run():
    """Guards the 5.x crop API change: a wrong crop leaves stale keys and changes the logits."""
    model = tiny_model(0)
    ids = torch.tensor([[3, 8, 1, 9, 4, 4, 7, 2, 5, 6]])
    with torch.no_grad():
        cache = new_cache(model)
        model(input_ids=ids, **cache_arg(model, cache), use_cache=True)
        assert cache_length(cache) == 10
        crop_cache(cache, 6)
        assert cache_length(cache) == 6
        other = torch.tensor([[11, 12, 13]])
        rolled = model(input_ids=other, **cache_arg(model, cache), use_cache=True).logits
        fresh = model(input_ids=torch.cat([ids[:, :6], other], 1), use_cache=False).logits[:, 6:]
    assert torch.allclose(rolled, fresh, atol=1e-5), transformers.__version__


def test_crop_to_same_length_is_a_no_op_and_growing_is_an_error():
    model = tiny_model(0)
    cache = new_cache(model)
    with torch.no_grad():
        model(input_ids=torch.tensor([[1, 2, 3]]), **cache_arg(model, cache), use_cache=True)
    crop_cache(cache, 3)
    assert cache_length(cache) == 3
    with pytest.raises(ValueError):
        crop_cache(cache, 4)


def test_leading_layers_is_a_view_that_grows_and_crops_only_those_layers():
    """An early-exit drafter drafts over leading_layers(target cache): a forward through the
    first layers extends the target's own layer objects, and cropping the view restores
    exactly what they held, leaving the other layers alone."""
    from specbench.core.cache import leading_layers

    model = tiny_model(0, layers=3)
    cache = new_cache(model)
    with torch.no_grad():
        model(input_ids=torch.tensor([[3, 8, 1, 9]]), **cache_arg(model, cache), use_cache=True)
        before = [layer.keys.clone() for layer in cache.layers]
        view = leading_layers(cache, 2)
        assert all(a is b for a, b in zip(view.layers, cache.layers[:2]))
        for layer, (key, value) in zip(view.layers, [(torch.ones(1, 2, 2, 8), torch.ones(1, 2, 2, 8))] * 2):
            layer.update(key, value)
        assert [layer.keys.shape[-2] for layer in cache.layers] == [6, 6, 4]
        crop_cache(view, 4)
    assert all(torch.equal(layer.keys, b) for layer, b in zip(cache.layers, before))
    with pytest.raises(ValueError):
        leading_layers(cache, 4)


def test_cache_arg_names_the_keyword_the_forward_declares():
    """transformers 5.24 renamed a forward's `past_key_values` to `cache` (the old name warns);
    earlier 5.x and remote code know `past_key_values` only. cache_arg reads the signature."""
    import inspect

    from mock_lm import TrigramLM

    model = tiny_model(0)
    declared = inspect.signature(type(model).forward).parameters
    expected = "cache" if "cache" in declared else "past_key_values"
    cache = new_cache(model)
    assert cache_arg(model, cache) == {expected: cache}
    assert list(cache_arg(TrigramLM(torch.zeros(2, 2, 2)), cache)) == [
        "past_key_values"
    ]  # a forward that knows only the old name


def test_generation_calls_the_model_without_deprecation_warnings():
    """Nothing specbench calls makes the installed transformers warn (a user sees every warning)."""
    import warnings

    from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
    from specbench.drafters import make_drafter
    from specbench.policies import make_policy

    target, drafter = tiny_model(0), tiny_model(1)
    gen = GenerationConfig(max_new_tokens=6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain_generate(target, [3, 8, 1], gen)
        speculative_generate(target, make_drafter("model", drafter), [3, 8, 1], gen, make_policy("fixed", 3))
