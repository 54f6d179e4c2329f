"""The model drafter's kept head between runs (bench/head_cache.py), on a tiny model: written
once a generation has read it, read back by a later "process" (a fresh registration) only
under its own key and ids, and ignored when the file is unusable."""

from __future__ import annotations

from copy import deepcopy
from types import SimpleNamespace

import torch
from conftest import tiny_model

from specbench.bench.head_cache import restore_head, save_head
from specbench.core.cache import cache_length
from specbench.drafters import ModelDrafter
from specbench.drafters.model import keep_head, kept_head

HEAD = [3, 17, 42, 8]
PROMPT = [*HEAD, 29, 5, 7]


def _drafts(model):
    drafter = ModelDrafter(model)
    drafter.prefill(torch.tensor(PROMPT))
    starts = cache_length(drafter.cache)
    return starts, drafter.propose(torch.tensor(PROMPT), 3, lambda step, q, token=None: True)


def test_a_kept_head_is_saved_once_read_and_restored_under_its_key(tmp_path):
    model = tiny_model(1, layers=1, hidden=16)
    unkept = deepcopy(model)
    pair = SimpleNamespace(drafter_model=SimpleNamespace(model=model))
    path = tmp_path / "head.pt"
    keep_head(model, HEAD)
    assert not save_head(pair, "key", path) and not path.exists()  # nothing read yet
    assert _drafts(model)[0] == 0  # the first generation reads the head (and keeps it)
    assert save_head(pair, "key", path) and path.is_file()

    keep_head(model, HEAD)  # a later run: the head registered, nothing read
    assert not restore_head(pair, "another key", path) and kept_head(model)[1] is None
    assert restore_head(pair, "key", path) and cache_length(kept_head(model)[1]) == len(HEAD)
    assert not restore_head(pair, "key", path)  # already read: nothing to do
    starts, draft = _drafts(model)
    fresh = ModelDrafter(unkept).propose(torch.tensor(PROMPT), 3, lambda step, q, token=None: True)
    assert starts == len(HEAD) and draft.feeds[0] == len(PROMPT) - len(HEAD)
    assert draft.tokens.tolist() == fresh.tokens.tolist() and torch.allclose(draft.probs, fresh.probs, atol=1e-5)

    keep_head(model, HEAD[:3])  # another head: the file's is not it
    assert not restore_head(pair, "key", path) and kept_head(model) == (tuple(HEAD[:3]), None)
    keep_head(model, HEAD)
    path.write_bytes(b"cut short")
    assert not restore_head(pair, "key", path) and kept_head(model) == (tuple(HEAD), None)


def test_no_drafter_model_keeps_no_head(tmp_path):
    pair = SimpleNamespace(drafter_model=None)
    assert not restore_head(pair, "key", tmp_path / "head.pt") and not save_head(pair, "key", tmp_path / "head.pt")
