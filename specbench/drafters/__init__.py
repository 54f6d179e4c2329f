"""Where draft tokens come from: the drafters and make_drafter.

The Drafter protocol (propose, start, prefill, commit) is core's: specbench/core/protocols.py.
A drafter owns its own state (the model drafter its KV cache, fed lazily: the first
propose prefills the prompt). It knows nothing about the target or about verification.
The model drafter's forward is a draft step (step.py), the model's own by default;
make_drafter plugs in specbench/speed's restricted step for vocab_limit > 0, the one place
this package reaches into speed/ (and only then: importing drafters loads nothing of it).

Drafters (DRAFTERS, built by make_drafter):
  model          a small causal LM (ModelDrafter), with q rows;
  model+lookup   a copy from the context when its last 3 tokens occurred before, else the
                 model (LookupFirstDrafter);
  ngram          2-, 3- and 4-gram counts of the context (NgramDrafter), no q;
  prompt-lookup  copy what followed the latest earlier match of the context's last n tokens
                 (PromptLookupDrafter, HF's prompt lookup decoding), no q.
The model-free drafters return probs=None, which verification treats as a one-hot q, and
keep incremental tables, so a round costs O(new tokens + drafts), not O(context).
"""

from __future__ import annotations

from specbench.core.protocols import Draft, Drafter, KeepDrafting
from specbench.drafters.model import LookupFirstDrafter, ModelDrafter
from specbench.drafters.step import DraftStep, ModelForward
from specbench.drafters.tables import (
    LookupIndex,
    NgramDrafter,
    NgramTable,
    PromptLookupDrafter,
    TableDrafter,
    copy_from,
    lookup_continuation,
    ngram_predict,
    table_draft,
)

__all__ = [
    "copy_from",
    "Draft",
    "draft_step",
    "Drafter",
    "DRAFTERS",
    "DraftStep",
    "KeepDrafting",
    "lookup_continuation",
    "LookupFirstDrafter",
    "LookupIndex",
    "make_drafter",
    "MODEL_DRAFTERS",
    "ModelDrafter",
    "ModelForward",
    "ngram_predict",
    "NgramDrafter",
    "NgramTable",
    "PromptLookupDrafter",
    "table_draft",
    "TableDrafter",
    "uses_model",
]

DRAFTERS = ("model", "model+lookup", "ngram", "prompt-lookup")
MODEL_DRAFTERS = ("model", "model+lookup")  # the drafters that draft with the drafter model


def uses_model(name: str) -> bool:
    """Whether the drafter called `name` runs the drafter model."""
    return name in MODEL_DRAFTERS


def make_drafter(name: str, drafter_model=None, vocab_limit: int = 0, keep_ids: tuple[int, ...] = ()) -> Drafter:
    """A drafter by name; "model" drafts with drafter_model (over ids below vocab_limit, the
    prompt's and keep_ids when vocab_limit > 0), the others need no model (and ignore one
    and the vocabulary if given)."""
    if uses_model(name):
        if drafter_model is None:
            raise ValueError(f"the {name} drafter needs a drafter model")
        model = ModelDrafter(drafter_model, step=draft_step(drafter_model, vocab_limit, keep_ids))
        return model if name == "model" else LookupFirstDrafter(model)
    if name == "ngram":
        return NgramDrafter()
    if name == "prompt-lookup":
        return PromptLookupDrafter()
    raise ValueError(f"unknown drafter {name!r}; choose from {', '.join(DRAFTERS)}")


def draft_step(drafter_model, vocab_limit: int = 0, keep_ids: tuple[int, ...] = ()) -> DraftStep:
    """The model's own forward (vocab_limit 0), else speed/'s RestrictedStep over ids below
    vocab_limit, the prompt's and keep_ids; a model without a plain output head is refused
    now (ValueError), not mid-generation."""
    if not vocab_limit:
        return ModelForward()
    # speed/ only when asked for (and draft_vocab, which imports step.py, after this package)
    from specbench.speed.draft_vocab import RestrictedStep

    return RestrictedStep.for_model(drafter_model, vocab_limit, keep_ids)
