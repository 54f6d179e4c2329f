"""Room ahead under a DynamicCache's layers, so that fused_step.py runs a forward's every
layer in one native call.

Why: between the two native calls of a layer, Python converted the layer's new key and
value rows, appended them with HF's `DynamicLayer.update` (a concatenation: every layer's
whole cache copied into a new tensor at every step; past 128 kB, a float32 target's layer
at about 130 tokens, each copy costs four times as much) and checked the result. Here a
layer's keys and values are views of a slab (two [1, kv heads, capacity, head dim] tensors
in one block) with room after them: the native call writes the new rows into the slab
itself, and the layer is then given views that many tokens longer.

The cache stays HF's DynamicCache, and everything else keeps working on it unchanged:
cropping shortens the views; HF's own `update` (the model's forward over a prompt)
concatenates, which leaves the slab, and the next native call copies the layer back into a
fresh one; `copy.deepcopy` copies a slab with its views. A slab is storage the cache owns:
code that keeps a layer's tensors beyond the cache's life must copy them
(core/cache.cache_tensors does).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

SLAB = "specbench_slab"  # the attribute a DynamicLayer keeps its slab under: (keys, values) at full capacity
ROOM = 256  # tokens a new slab keeps free past what it must hold (a quarter of that, if more)


def slabs(cache, count: int, total: int, dtype: torch.dtype, kv_heads: int, head_dim: int) -> list | None:
    """The slabs of the cache's first `count` layers, one capacity for all, each holding its
    layer's keys and values and room for `total` tokens; made anew (the layers' tensors
    copied in) where a layer has none, has left it, or needs more room. None where the
    layers are not plain full-attention DynamicLayers of batch 1 in float32 or bfloat16 (a
    sliding window's layer, say): the caller then appends through the cache.

    Called before every native forward, so the usual case (every layer still in a slab with
    room) reads each layer's type, data pointers and strides and its slab's layout, and makes
    no view: a layer whose tensors are views of a slab made for this layout has that layout."""
    layers = list(getattr(cache, "layers", ()))[:count]
    if len(layers) < count or dtype not in (torch.float32, torch.bfloat16):
        return None
    current = [getattr(layer, SLAB, None) for layer in layers]
    layout = (dtype, kv_heads, head_dim)
    if all(
        type(layer) is DynamicLayer and slab is not None and _layout(slab) == layout and _holds(layer, slab)
        for layer, slab in zip(layers, current)
    ):
        capacities = {slab[0].shape[2] for slab in current}
        if len(capacities) == 1 and capacities.pop() >= total:
            return current
    if any(type(layer) is not DynamicLayer or not _fits(layer, dtype, kv_heads, head_dim) for layer in layers):
        return None
    capacity = total + max(ROOM, total // 4)  # a long context's cache grows by a quarter, not double
    return [_adopt(layer, capacity, dtype, kv_heads, head_dim) for layer in layers]


def extend(cache, slabs_: list, length: int) -> None:
    """Give each of the first len(slabs_) layers views of its slab's first `length` tokens,
    after a native call wrote the new rows into the slabs."""
    for layer, (keys, values) in zip(cache.layers, slabs_):
        keys, values = keys.narrow(2, 0, length), values.narrow(2, 0, length)
        if not layer.is_initialized:
            layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values


def _length(layer) -> int:
    return layer.keys.shape[-2] if layer.is_initialized and layer.keys.dim() == 4 else 0


def _layout(slab: tuple[torch.Tensor, torch.Tensor]) -> tuple:
    """(dtype, kv heads, head dim) of a slab."""
    keys = slab[0]
    return keys.dtype, keys.shape[1], keys.shape[3]


def _fits(layer, dtype: torch.dtype, kv_heads: int, head_dim: int) -> bool:
    """Whether the layer is empty, or holds batch-1 CPU tensors of this layout and dtype."""
    if _length(layer) == 0:
        return True
    keys, values = layer.keys, layer.values
    shape = (1, kv_heads, keys.shape[2], head_dim)
    return all(t.shape == shape and t.dtype == dtype and t.device.type == "cpu" for t in (keys, values))


def _holds(layer, slab: tuple[torch.Tensor, torch.Tensor]) -> bool:
    """Whether the layer is empty or its keys and values are views of the slab's first tokens."""
    if _length(layer) == 0:
        return True
    keys, values = layer.keys, layer.values
    return (
        keys.data_ptr() == slab[0].data_ptr()
        and values.data_ptr() == slab[1].data_ptr()
        and keys.stride() == values.stride() == slab[0].stride()
    )


def _adopt(layer, capacity: int, dtype: torch.dtype, kv_heads: int, head_dim: int) -> tuple:
    """A new slab for the layer (keys and values in one block), its tensors copied in and the
    layer given views of them."""
    slab = torch.empty(2, 1, kv_heads, capacity, head_dim, dtype=dtype).unbind(0)
    length = _length(layer)
    if length:
        for full, held in zip(slab, (layer.keys, layer.values)):
            full.narrow(2, 0, length).copy_(held)
        layer.keys, layer.values = (full.narrow(2, 0, length) for full in slab)
    setattr(layer, SLAB, slab)
    return slab
