"""Whether a drafter model can work with a target, and how its drafts reach it.

A drafter whose ids mean the target's tokens drafts ids (check_vocab); one with another
tokenizer drafts through text (drafters.translated), or the pair is refused with one line
(VocabMismatch). Also the ids that end a generation, and the few words that name a drafter's
mapping in the trace and in results. Pure checks over loaded models: nothing loads here.
"""

from __future__ import annotations

from specbench.drafters import parse_early_exit, uses_model
from specbench.drafters.translated import TextCodec, check_translatable
from specbench.errors import VocabMismatch, reraise_as
from specbench.models.model import LoadedModel
from specbench.models.specs import NONE


def output_vocab_size(model) -> int:
    """How many ids the model scores: the rows of its output embedding (its logits' width)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)


def eos_token_ids(model, tokenizer=None) -> tuple[int, ...]:
    """Every id that ends a generation: the tokenizer's EOS and the model's configured ones."""
    found: list[int] = []
    generation_config = getattr(model, "generation_config", None)
    sources = (
        getattr(tokenizer, "eos_token_id", None),
        getattr(generation_config, "eos_token_id", None),
        getattr(model.config, "eos_token_id", None),
    )
    for value in sources:
        for token in [value] if isinstance(value, int) else list(value or []):
            if token not in found:
                found.append(int(token))
    return tuple(found)


def check_vocab(target: LoadedModel, drafter: LoadedModel) -> None:
    """Raise VocabMismatch unless the drafter's ids mean the same tokens as the target's.

    Checks, in order: the logits width, the token -> id map of the tokenizers (the first id
    whose token differs is named), and the tokenizers' EOS. A drafter without a tokenizer is
    checked by width and configured EOS only.
    """
    t_width, d_width = output_vocab_size(target.model), output_vocab_size(drafter.model)
    if t_width != d_width:
        raise VocabMismatch(
            f"vocabularies differ: the target {target.name} scores {t_width} token ids, "
            f"the drafter {drafter.name} {d_width}"
        )
    if drafter.tokenizer is target.tokenizer:
        return  # one tokenizer, shared because its files are identical
    if drafter.tokenizer is None or target.tokenizer is None:
        t_eos, d_eos = target.model.config.eos_token_id, drafter.model.config.eos_token_id
        if t_eos != d_eos:
            raise VocabMismatch(f"EOS differs: target {t_eos}, drafter {d_eos}")
        return
    difference = first_vocab_difference(target.tokenizer.get_vocab(), drafter.tokenizer.get_vocab())
    if difference is not None:
        raise VocabMismatch(f"vocabularies differ: {difference}")
    t_eos, d_eos = target.tokenizer.eos_token_id, drafter.tokenizer.eos_token_id
    if t_eos != d_eos:
        raise VocabMismatch(
            f"EOS differs: target {target.tokenizer.eos_token!r} (id {t_eos}), "
            f"drafter {drafter.tokenizer.eos_token!r} (id {d_eos})"
        )


def translates(target: LoadedModel, drafter: LoadedModel) -> bool:
    """How the drafter's drafts reach the target: False when its ids are the target's
    (check_vocab passes), True when its tokenizer differs and drafts are translated through
    text. VocabMismatch (one line) when neither can work: a side without a tokenizer, a
    drafter tokenizer that cannot decode, or tokenizers with no common text."""
    try:
        check_vocab(target, drafter)
        return False
    except VocabMismatch as mismatch:
        if drafter.tokenizer is None or target.tokenizer is None:
            side = "drafter" if drafter.tokenizer is None else "target"
            raise VocabMismatch(
                f"{mismatch}, and the {side} has no tokenizer to translate drafts through text"
            ) from None
    with reraise_as(VocabMismatch):
        check_translatable(TextCodec(target.tokenizer), TextCodec(drafter.tokenizer))
    return True


def timing_ids(ids: list[int], *models) -> list[int]:
    """ids that every one of the models can embed, for timing forwards only (a drafter with
    another tokenizer cannot read the target's ids): each id modulo the narrowest vocabulary."""
    width = min(output_vocab_size(m) for m in models if m is not None)
    return [i % width for i in ids]


def first_vocab_difference(target_vocab: dict[str, int], draft_vocab: dict[str, int]) -> str | None:
    """None if both token -> id maps are equal, else where they first differ (by id)."""
    if target_vocab == draft_vocab:
        return None
    t_by_id = {i: t for t, i in target_vocab.items()}
    d_by_id = {i: t for t, i in draft_vocab.items()}
    for token_id in sorted(set(t_by_id) | set(d_by_id)):
        t, d = t_by_id.get(token_id), d_by_id.get(token_id)
        if t != d:
            sizes = f"{len(target_vocab)} vs {len(draft_vocab)} tokens"
            return f"first at id {token_id}: target {_show(t)}, drafter {_show(d)} ({sizes})"
    return f"{len(target_vocab)} vs {len(draft_vocab)} tokens"  # unreachable for well-formed maps


def _show(token: str | None) -> str:
    return "no token" if token is None else repr(token)


def drafter_mapping(drafter_name: str, translated: bool = False, target_model=None) -> str:
    """How a drafter's drafts reach the target: ids of a shared tokenizer, text translated
    between two tokenizers, the target's own first layers, or copies of the context."""
    if drafter_name == NONE:
        return "no drafter: plain decoding"
    layers = parse_early_exit(drafter_name)
    if layers is not None:
        return early_exit_mapping(
            str(layers), getattr(getattr(target_model, "config", None), "num_hidden_layers", None)
        )
    if not uses_model(drafter_name):
        return "no model: the target's ids, copied from the context"
    return (
        "another tokenizer: drafts translated through text"
        if translated
        else "tokenizer shared: draft ids are the target's"
    )


def early_exit_mapping(layers: str, total: int | None = None) -> str:
    of = f" of {total}" if total else ""
    return f"early exit: the target's first {layers}{of} layers, its norm and head, its KV cache shared"
