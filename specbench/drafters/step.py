"""The draft step: how a model drafter turns the tokens it feeds into the next token's logits.

ModelDrafter (model.py) owns the cache, the drafting loop and the sampling; a DraftStep owns
only the forward. The default, ModelForward, is the model's own forward. Faster steps plug
in from specbench/speed (draft_vocab.RestrictedStep: the lean forward and a head over part
of the vocabulary); a step may change what a forward costs and which ids q can hold, never
what verification does with q, so every step is lossless.
"""

from __future__ import annotations

from typing import Protocol

import torch

from specbench.core.cache import cache_arg


class DraftStep(Protocol):
    """What the model drafter asks of a step, per generation:

    start(model, prompt)            a generation begins with this prompt ([n] ids), before
                                    its first forward: reset any per-generation state;
    observe(new_ids)                the context gained these ids ([m], what the target
                                    accepted or emitted) since start or the last observe;
    __call__(model, input_ids, cache)  feed input_ids ([1, n]) after what the cache holds
                                    (which it extends) -> the next token's logits [vocab].
    """

    def start(
        self,
        model,
        prompt: torch.Tensor,  # [n] ids
    ) -> None: ...

    def observe(
        self,
        new_ids: torch.Tensor,  # [m] ids
    ) -> None: ...

    def __call__(
        self,
        model,
        input_ids: torch.Tensor,  # [1, n] ids
        cache,
    ) -> torch.Tensor: ...


class ModelForward:
    """The default draft step: the model's own forward, the last position's logits.
    Stateless, so start and observe do nothing and one instance serves any drafter."""

    def start(
        self,
        model,
        prompt: torch.Tensor,  # [n] ids
    ) -> None:
        """No-op: nothing depends on the prompt."""

    def observe(
        self,
        new_ids: torch.Tensor,  # [m] ids
    ) -> None:
        """No-op: nothing depends on the context."""

    def __call__(
        self,
        model,
        input_ids: torch.Tensor,  # [1, n] ids
        cache,
    ) -> torch.Tensor:
        out = model(input_ids=input_ids, **cache_arg(model, cache), use_cache=True, logits_to_keep=1)
        return out.logits[0, -1]  # [vocab]
