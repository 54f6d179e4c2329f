"""The only module that touches KV-cache internals.

transformers changed `DynamicCache.crop` within 5.x: early 5.x took the length to keep
(`crop(max_length)`), later releases (5.23 here) take a negative count of tokens to remove
and raise on a positive one. We read which one the installed version has from the method's
parameter name rather than guessing from version numbers.
"""

from __future__ import annotations

import inspect

from transformers import DynamicCache


def new_cache(model) -> DynamicCache:
    """An empty DynamicCache laid out for `model` (sliding-window layers included)."""
    config = getattr(model, "config", None)
    try:
        return DynamicCache(config=config)
    except Exception:  # configs that DynamicCache cannot read (e.g. test doubles)
        return DynamicCache()


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
