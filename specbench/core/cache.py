"""The only module that touches KV-cache internals, and the one that names the cache to a model.

transformers changed both within 5.x, so we read the installed version's signatures rather
than guess from version numbers:
- `DynamicCache.crop`: early 5.x took the length to keep (`crop(max_length)`), later
  releases (5.23) take a negative count of tokens to remove and raise on a positive one;
- a model's forward takes its cache as `cache` from 5.24, which deprecates
  `past_key_values` (a FutureWarning on every call site); earlier 5.x and remote code take
  `past_key_values` only. cache_arg gives the keyword the model's own forward declares.
"""

from __future__ import annotations

import copy
import functools
import inspect

import torch
from transformers import DynamicCache

_CACHE_KEYWORDS = ("cache", "past_key_values")


def new_cache(model) -> DynamicCache:
    """An empty DynamicCache laid out for `model` (sliding-window layers included), ready to
    be rolled back: a sliding-window layer drops the states that leave its window at once
    unless it records them, and then cannot be cropped past the window (Mistral, Gemma 2 and
    3, Qwen2 with a window; HF's assisted generation turns recording on the same way).
    Recording keeps a sliding layer's states until the next crop_cache: never more than a
    full-attention layer holds."""
    config = getattr(model, "config", None)
    try:
        cache = DynamicCache(config=config)
    except Exception:  # configs that DynamicCache cannot read (e.g. test doubles)
        cache = DynamicCache()
    if hasattr(cache, "activate_past_recording"):
        cache.activate_past_recording()
    return cache


def cache_keyword(model) -> str:
    """The keyword `model`'s forward takes a KV cache by: "cache" or "past_key_values".
    A wrapper whose forward takes **kwargs only says which through its own cache_keyword
    attribute (drafters.early_exit.EarlyExitModel); else "past_key_values"."""
    own = getattr(model, "cache_keyword", None)
    if isinstance(own, str):
        return own
    return _forward_keyword(type(model))


@functools.cache
def _forward_keyword(model_class) -> str:
    try:
        params = inspect.signature(model_class.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return "past_key_values"
    return next((name for name in _CACHE_KEYWORDS if name in params), "past_key_values")


def cache_arg(model, cache) -> dict:
    """{keyword: cache} for a forward call: model(input_ids=..., **cache_arg(model, cache))."""
    return {cache_keyword(model): cache}


def cache_length(cache: DynamicCache) -> int:
    """Tokens held in the cache."""
    return int(cache.get_seq_length())


def _crop_takes_count() -> bool:
    params = list(inspect.signature(DynamicCache.crop).parameters)
    return len(params) > 1 and params[1] == "tokens_to_remove"


_CROP_TAKES_COUNT = _crop_takes_count()


def crop_cache(cache: DynamicCache, keep: int) -> None:
    """Roll the cache back so that it holds exactly its first `keep` tokens."""
    current = cache_length(cache)
    if keep > current:
        raise ValueError(f"cannot crop a cache of {current} tokens to {keep}")
    if keep == current:
        return
    if _CROP_TAKES_COUNT:
        cache.crop(keep - current)  # negative: remove that many from the end
    else:
        cache.crop(keep)


def copy_cache(cache: DynamicCache, keep: int) -> DynamicCache:
    """A copy of `cache` that holds its first `keep` tokens (`cache` is left as it is)."""
    copied = copy.deepcopy(cache)
    crop_cache(copied, keep)
    return copied


def cache_tensors(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's keys and values ([batch, kv heads, tokens, head dim]): what a cache holds,
    to keep elsewhere (cache_from_tensors builds one back). Copies: a layer's tensors may be
    views of storage that later forwards write into (native layers keep room ahead)."""
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


def cache_from_tensors(model, tensors: list[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    """A new cache for `model` (new_cache) holding these layers' keys and values."""
    cache = new_cache(model)
    for i, (keys, values) in enumerate(tensors):
        cache.update(keys, values, i)
    return cache


def leading_layers(cache: DynamicCache, n_layers: int) -> DynamicCache:
    """A cache whose layers ARE the first n_layers of `cache` (the same layer objects, not
    copies). A forward through a model's first n_layers over it reads and extends those
    layers of `cache`, and crop_cache on it crops those alone: how an early-exit drafter
    shares the target's cache for the layers it runs."""
    if not 0 < n_layers <= len(cache.layers):
        raise ValueError(f"cannot share {n_layers} layers of a cache with {len(cache.layers)}")
    view = DynamicCache()
    view.layers = list(cache.layers[:n_layers])
    return view
