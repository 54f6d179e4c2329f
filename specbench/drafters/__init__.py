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
                 (PromptLookupDrafter, HF's prompt lookup decoding), no q;
  early-exit:N   the target's own first N layers, final norm and head (EarlyExitDrafter,
                 early_exit.py), over the target's cache for those layers.
A model drafter whose tokenizer is not the target's drafts through TranslatedDrafter
(translated.py): its drafts reach the target as text, re-encoded in the target's ids.
The model-free drafters return probs=None, which verification treats as a one-hot q, and
keep incremental tables, so a round costs O(new tokens + drafts), not O(context).
"""

from __future__ import annotations

from specbench.core.protocols import Draft, Drafter, KeepDrafting
from specbench.drafters.early_exit import EarlyExitDrafter, parse_early_exit
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
from specbench.drafters.translated import TranslatedDrafter

__all__ = [
    "copy_from",
    "Draft",
    "draft_step",
    "Drafter",
    "DRAFTERS",
    "DraftStep",
    "EarlyExitDrafter",
    "is_drafter",
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
    "parse_early_exit",
    "PromptLookupDrafter",
    "table_draft",
    "TableDrafter",
    "TranslatedDrafter",
    "uses_model",
]

DRAFTERS = ("model", "model+lookup", "ngram", "prompt-lookup")
MODEL_DRAFTERS = ("model", "model+lookup")  # the drafters that draft with the drafter model


def uses_model(name: str) -> bool:
    """Whether the drafter called `name` runs the drafter model."""
    return name in MODEL_DRAFTERS


def is_drafter(name: str) -> bool:
    """A name make_drafter knows: one of DRAFTERS or early-exit:N (a bad N raises ValueError)."""
    return name in DRAFTERS or parse_early_exit(name) is not None


def make_drafter(
    name: str,
    drafter_model=None,
    vocab_limit: int = 0,
    keep_ids: tuple[int, ...] = (),
    *,
    target_model=None,
    translate: tuple | None = None,
) -> Drafter:
    """A drafter by name; "model" drafts with drafter_model (over ids below vocab_limit, the
    prompt's and keep_ids when vocab_limit > 0), "early-exit:N" with target_model's first N
    layers; the others need no model (and ignore one and the vocabulary if given).
    translate = (drafter_tokenizer, target_tokenizer, target_vocab_size): the drafter model
    has another tokenizer than the target, and its drafts go through text (its head then
    scores all its ids: the restricted head's ids are the target's)."""
    layers = parse_early_exit(name)
    if layers is not None:
        if target_model is None:
            raise ValueError(f"the {name} drafter drafts with the target's layers: it needs the target model")
        return EarlyExitDrafter(target_model, layers)
    if uses_model(name):
        if drafter_model is None:
            raise ValueError(f"the {name} drafter needs a drafter model")
        if translate is not None:
            model = TranslatedDrafter(drafter_model, *translate)
        else:
            model = ModelDrafter(drafter_model, step=draft_step(drafter_model, vocab_limit, keep_ids))
        return model if name == "model" else LookupFirstDrafter(model)
    if name == "ngram":
        return NgramDrafter()
    if name == "prompt-lookup":
        return PromptLookupDrafter()
    raise ValueError(f"unknown drafter {name!r}; choose from {', '.join(DRAFTERS)} or early-exit:N")


def draft_step(drafter_model, vocab_limit: int = 0, keep_ids: tuple[int, ...] = ()) -> DraftStep:
    """The model's own forward (vocab_limit 0), else speed/'s RestrictedStep over ids below
    vocab_limit, the prompt's and keep_ids; a model without a plain output head is refused
    now (ValueError), not mid-generation."""
    if not vocab_limit:
        return ModelForward()
    # speed/ only when asked for (and draft_vocab, which imports step.py, after this package)
    from specbench.speed.draft_vocab import RestrictedStep

    return RestrictedStep.for_model(drafter_model, vocab_limit, keep_ids)
