"""Self-speculation by early exit (LayerSkip-style): the target drafts with its own first N
layers, then its own final norm and head. No second model.

EarlyExitModel is the target seen as a smaller causal LM: its forward runs the first N
decoder layers only (as transformers' EarlyExitCandidateGenerator does, by lowering the base
model's num_hidden_layers for the duration of the call, which the decoder's layer loop
reads), so the ModelDrafter's loop, sampling and draft steps run it unchanged, and costs.py
times it like any drafter model.

EarlyExitDrafter shares the target's KV cache for those N layers: their keys and values
for every verified position are exactly what the drafter would compute itself (the same
layers on the same inputs), so it never prefills and never re-reads the context. Given the
target's cache at prefill, it drafts over a view of its first N layers (core.cache.
leading_layers) and crops them back when its proposal is done, so the verify pass finds the
target's cache as the loop left it. Without one (a drafter used outside the loop) it keeps
a cache of its own, as the model drafter does. Lossless like any drafter: the target
verifies every draft with its full depth.
"""

from __future__ import annotations

import inspect
import re
from contextlib import contextmanager

import torch

from specbench.core.cache import cache_keyword, cache_length, crop_cache, leading_layers
from specbench.core.protocols import Draft, ForwardPays, KeepDrafting
from specbench.drafters.model import ModelDrafter

PREFIX = "early-exit:"  # a drafter name: early-exit:N drafts with the target's first N layers


def parse_early_exit(name: str) -> int | None:
    """N for a drafter name "early-exit:N"; None for any other name; ValueError for a bad N."""
    if not name.startswith(PREFIX):
        return None
    text = name[len(PREFIX) :]
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"bad drafter {name!r}: early-exit:N needs a number of layers N >= 1")
    return int(text)


def base_model(model):
    """The decoder stack of a causal LM (model.model for Qwen2 and Llama)."""
    return getattr(model, getattr(model, "base_model_prefix", "model"), model)


_LAYER_LOOP = re.compile(r"self\.layers\[\s*:\s*self\.config\.num_hidden_layers\s*\]")


def check_early_exit(model, n_layers: int) -> None:
    """ValueError unless the model's decoder loop reads num_hidden_layers (so lowering it
    exits early) and 1 <= n_layers < its depth."""
    base = base_model(model)
    total = int(getattr(base.config, "num_hidden_layers", 0) or 0)
    try:
        source = inspect.getsource(type(base).forward)
    except (OSError, TypeError):
        source = ""
    if not total or not _LAYER_LOOP.search(source):
        raise ValueError(
            f"{type(model).__name__} cannot exit early: its decoder does not stop at config.num_hidden_layers"
        )
    if not 1 <= n_layers < total:
        raise ValueError(f"early-exit:{n_layers}: the target has {total} layers; choose N from 1 to {total - 1}")


@contextmanager
def exit_after(model, n_layers: int):
    """Within the block, the model's forward runs its first n_layers decoder layers only."""
    config = base_model(model).config
    total = config.num_hidden_layers
    config.num_hidden_layers = n_layers
    try:
        yield
    finally:
        config.num_hidden_layers = total


class EarlyExitModel(torch.nn.Module):
    """The target's first n_layers, its final norm and head, called like a causal LM
    (input_ids, the cache by the target's keyword, use_cache, logits_to_keep). Its parameters
    are the target's."""

    def __init__(self, target, n_layers: int):
        super().__init__()
        check_early_exit(target, n_layers)
        self.target = target
        self.n_layers = n_layers
        self.total_layers = int(base_model(target).config.num_hidden_layers)
        self.config = target.config
        self.cache_keyword = cache_keyword(target)  # its forward takes **kwargs: say which

    def forward(self, **kwargs):
        with exit_after(self.target, self.n_layers):
            return self.target(**kwargs)


class EarlyExitDrafter(ModelDrafter):
    """Drafts with EarlyExitModel over the target's own cache for those layers (see the
    module docstring); commit has nothing to roll back then: the loop crops the target's
    cache, and the shared layers with it."""

    def __init__(self, target, n_layers: int):
        super().__init__(EarlyExitModel(target, n_layers), name=f"{PREFIX}{n_layers}")

    def start(self, sampling, generator) -> None:
        super().start(sampling, generator)
        self._shared = False

    @torch.inference_mode()
    def prefill(
        self,
        prompt: torch.Tensor,  # [n] ids
        target_cache=None,
    ) -> None:
        if target_cache is None:
            return super().prefill(prompt)
        self.cache = leading_layers(target_cache, self.model.n_layers)
        self._shared = True
        self._observe(prompt)

    def propose(
        self,
        context: torch.Tensor,  # [n] ids
        max_tokens: int,
        keep_drafting: KeepDrafting,
        forward_pays: ForwardPays | None = None,
    ) -> Draft:
        held = cache_length(self.cache)  # shared: the target's, every token but the last
        draft = super().propose(context, max_tokens, keep_drafting, forward_pays)
        if self._shared:
            crop_cache(self.cache, held)  # leave the target's layers as the loop left them
        return draft

    def commit(self, n_accepted: int) -> None:
        if not self._shared:
            super().commit(n_accepted)
