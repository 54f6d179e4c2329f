"""Where draft tokens come from: the Drafter protocol and its drafters.

    propose(context, max_tokens, keep_drafting) -> Draft
        context: [n] every token so far (prompt + output); max_tokens: the policy's gamma;
        keep_drafting(step, probs): the policy's per-step say (see gamma.py).
    start(sampling, generator)
        a new generation begins: drop all state; use the SAME sampling processor as the target
        (rejection sampling is lossless only then) and draw from the given generator.
    commit(n_accepted)
        the target kept the first n_accepted drafts and then emitted one more token; roll
        any internal state back to match.

A drafter owns its own state (the model drafter its KV cache, fed lazily: the first
propose prefills the prompt). It knows nothing about the target or about verification.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from specbench.cache import cache_length, crop_cache, new_cache
from specbench.sampling import SamplingConfig, choose

KeepDrafting = Callable[[int, "torch.Tensor | None"], bool]


@dataclass
class Draft:
    tokens: torch.Tensor  # [k] proposed ids, k <= max_tokens (may be 0)
    probs: torch.Tensor | None  # [k, vocab] q after the sampling processor, or None
    seconds: float = 0.0  # wall time of the proposal


class Drafter(Protocol):
    name: str

    def propose(self, context: torch.Tensor, max_tokens: int, keep_drafting: KeepDrafting) -> Draft: ...

    def commit(self, n_accepted: int) -> None: ...

    def start(self, sampling: SamplingConfig, generator: torch.Generator | None) -> None:
        """Forget the last generation; draw with this processor and generator from now on."""
        ...


class ModelDrafter:
    """A small causal LM that drafts autoregressively over its own DynamicCache."""

    def __init__(self, model, name: str = "model"):
        self.model = model
        self.name = name
        self.device = next(model.parameters()).device
        self.start(SamplingConfig(), None)

    def start(self, sampling: SamplingConfig, generator: torch.Generator | None) -> None:
        self.sampling = sampling
        if generator is not None and generator.device != self.device:
            # a generator cannot draw on another device: derive one here, still seeded
            generator = torch.Generator(self.device).manual_seed(generator.initial_seed() + 1)
        self.generator = generator
        self.cache = new_cache(self.model)
        self._context_len = 0  # length of the context at the last propose

    @torch.inference_mode()
    def propose(self, context: torch.Tensor, max_tokens: int, keep_drafting: KeepDrafting) -> Draft:
        start = time.perf_counter()
        self._context_len = context.shape[0]
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        if max_tokens > 0:
            # feed only what the cache has not seen: the prompt on the first round, then the
            # tokens the target accepted or emitted since the last round
            pending = context[cache_length(self.cache):]
            for step in range(max_tokens):
                logits = self._forward(pending)
                token, probs = choose(logits, self.sampling, self.generator)
                if not keep_drafting(step, probs):
                    break
                tokens.append(token)
                rows.append(probs)
                pending = torch.tensor([token], device=self.device)
        probs = torch.stack(rows) if rows else None
        ids = torch.tensor(tokens, dtype=torch.long, device=context.device)
        return Draft(ids, probs, time.perf_counter() - start)

    def _forward(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """Logits for the next token after feeding new_tokens ([n] ids) -> [vocab]."""
        out = self.model(
            input_ids=new_tokens.to(self.device).unsqueeze(0),
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[0, -1]

    def commit(self, n_accepted: int) -> None:
        # The cache holds the context plus every draft except the last (never fed), and a
        # draft step that was stopped by keep_drafting still fed its input. Keep the context
        # and the accepted drafts that were fed.
        keep = min(self._context_len + n_accepted, cache_length(self.cache))
        crop_cache(self.cache, keep)


# ---------------------------------------------------------------------------- factory

DRAFTERS = ("model",)


def make_drafter(name: str, drafter_model=None) -> Drafter:
    """A drafter by name; "model" drafts with drafter_model."""
    if name == "model":
        if drafter_model is None:
            raise ValueError("the model drafter needs a drafter model")
        return ModelDrafter(drafter_model)
    raise ValueError(f"unknown drafter {name!r}; choose from {', '.join(DRAFTERS)}")
