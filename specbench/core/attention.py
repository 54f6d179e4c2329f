"""Attention whose rows do not depend on how many rows share the call: greedy parity in floats.

Speculative decoding checks k drafts in one target forward of k+1 rows; plain decoding feeds
one row at a time. The two agree token for token only if a row's logits come out bit for
bit the same either way. A linear can be made so (speed/int8_linear.c accumulates exactly),
norms and activations already are (they work row by row), but PyTorch's scaled dot-product
attention is not: a one-row query goes through other kernel shapes (GQA packed, a
matrix-vector product) than a block of rows, and the last bits of every row differ. At a
near tie (two logits 5e-4 apart, seen on the default pair) the argmax flips and the texts part.

So every forward over a cache computes each query row by itself, with the keys that row
attends (a causal or sliding-window range read off the mask) and no mask: the same call, on
the same shapes and values, that a one-row decoding step makes at that position. The prompt's
first forward (no cache yet) keeps the one fused call; plain and speculative decoding both
make it with the same rows. Anything the row loop cannot express (a batch, padding, a float
mask, a position bias) falls back to the fused call.

The cost is k+1 small attention calls a layer instead of one; the linears dominate a forward
on a CPU, so a verify forward barely notices. models/loading.py switches CPU targets to it
(on a GPU the dense kernels round by batch anyway, and each call is a kernel launch).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ROWS = "specbench_rows"  # the attn_implementation name this module registers


def row_invariant_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' attention signature: query [b, heads, rows, d], key and value
    [b, kv_heads, keys, d] (the cache included); returns ([b, rows, heads, d], None)."""
    ranges = _key_ranges(query, key, attention_mask, kwargs)
    if ranges is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    rows = [
        sdpa_attention_forward(module, query[:, :, i : i + 1], key[:, :, a:b], value[:, :, a:b], None, **kwargs)[0]
        for i, (a, b) in enumerate(ranges)
    ]
    return (rows[0] if len(rows) == 1 else torch.cat(rows, dim=1)), None


def _key_ranges(query, key, mask, kwargs) -> list[tuple[int, int]] | None:
    """Each query row's attended keys as [start, end), or None: use the fused call."""
    n_rows, n_keys = query.shape[2], key.shape[2]
    if n_rows >= n_keys or query.shape[0] != 1 or kwargs.get("position_bias") is not None:
        return None  # a prefill (no cache: the same call in every mode), a batch, a bias
    if mask is None:
        return [(0, n_keys)] if n_rows == 1 else None
    if mask.dtype != torch.bool or mask.shape[:2] != (1, 1) or mask.shape[-1] != n_keys:
        return None
    return mask_ranges(mask[0, 0])


def mask_ranges(mask: torch.Tensor) -> list[tuple[int, int]] | None:
    """[rows, keys] boolean -> each row's True keys as [start, end), or None if some row's
    are not one contiguous, non-empty range."""
    count = mask.sum(dim=-1)
    start = mask.int().argmax(dim=-1)
    keys = torch.arange(mask.shape[-1], device=mask.device)
    band = (keys >= start[:, None]) & (keys < (start + count)[:, None])
    if not bool(torch.equal(band, mask)) or not bool((count > 0).all()):
        return None
    return [(a, a + n) for a, n in zip(start.tolist(), count.tolist())]


def register() -> None:
    """Make ROWS an attention implementation transformers knows, with sdpa's masks."""
    if ROWS not in AttentionInterface._global_mapping:
        AttentionInterface.register(ROWS, row_invariant_attention)
        AttentionMaskInterface.register(ROWS, sdpa_mask)


def use_row_invariant_attention(model) -> bool:
    """Switch a model that runs sdpa attention to ROWS; False where it runs another
    implementation (eager, flash) or cannot switch, which is left as it is."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return getattr(config, "_attn_implementation", None) == ROWS
    register()
    try:
        model.set_attn_implementation(ROWS)
    except (ValueError, AttributeError):
        return False
    return model.config._attn_implementation == ROWS
