"""The model drafter's kept head between runs: its cache over the opening of the chat template
(drafters.model.keep_head), kept in the cache folder beside the pair's costs.

A loaded drafter reads the head once and copies it into every later generation; a one-shot
`specbench generate` has no later generation, so it keeps the head in a file, as llama.cpp's
--prompt-cache keeps a prompt, and the next run starts with it read. The key names what the
cache's numbers depend on: the costs' key (cost_cache.cost_key: both models, dtypes, device,
kernels and their version, threads), torch's version, and the head's ids. A file that is
missing, unreadable or of another key is ignored and then replaced: the drafter's cache
never decides a verdict, so a head is a head start, never needed for a correct run.
"""

from __future__ import annotations

from pathlib import Path

import torch

from specbench import paths
from specbench.bench.cost_cache import cost_key
from specbench.bench.costs import slug, write_atomic
from specbench.core.cache import cache_from_tensors, cache_tensors
from specbench.core.generate import model_device
from specbench.core.sampling import SamplingConfig
from specbench.drafters.model import keep_head, kept_head, read_length

FORMAT = 1  # the file's layout; a file of another format is ignored


def head_key(pair, pair_config, kernels: str) -> str:
    """The cache key of a pair's kept head under these settings (sampling plays no part)."""
    return f"{cost_key(pair, pair_config, kernels, SamplingConfig())}|torch={torch.__version__}"


def default_path(key: str) -> Path:
    """The cache folder's head file for `key`."""
    return paths.costs_dir() / f"{slug(key)}.head.pt"


def _drafter_head(pair) -> tuple[object | None, tuple[int, ...], object | None]:
    """The pair's drafter model (None: no model drafts), the head it keeps and its cache
    over it (drafters.model.kept_head)."""
    model = pair.drafter_model.model if pair.drafter_model is not None else None
    return (model, *kept_head(model)) if model is not None else (None, (), None)


def restore_head(pair, key: str, path: Path | None = None) -> bool:
    """Start the pair's drafter with its head read, from the file at path (default_path):
    True when the file holds the head this drafter keeps, under `key`; else nothing changes."""
    model, ids, cache = _drafter_head(pair)
    if not ids or cache is not None:
        return False
    try:
        raw = torch.load(path or default_path(key), map_location=model_device(model), weights_only=True)
        if raw.get("format") != FORMAT or raw.get("key") != key or tuple(raw.get("ids", ())) != ids:
            return False
        keep_head(model, ids, cache_from_tensors(model, raw["layers"]))
    except Exception:  # missing, cut short, edited, of another layout: read the head as usual
        keep_head(model, ids)
        return False
    return True


def starts_with(pair, prompt_ids: list[int]) -> int | None:
    """How many of the prompt's ids the pair's drafter starts this generation with, already
    read (0: it reads the whole prompt, its head included, as a first run does); None
    without a model drafter."""
    model, _, _ = _drafter_head(pair)
    return read_length(model, prompt_ids) if model is not None else None


def save_head(pair, key: str, path: Path | None = None) -> bool:
    """Write the drafter's kept head to the file at path (default_path) once a generation has
    read it, atomically (a reader sees the old file or the new one); False when there is
    nothing to keep or the folder cannot be written (the next run reads the head again)."""
    _, ids, cache = _drafter_head(pair)
    if cache is None:
        return False
    data = {"format": FORMAT, "key": key, "ids": list(ids), "layers": cache_tensors(cache)}
    try:
        write_atomic(Path(path or default_path(key)), lambda handle: torch.save(data, handle))
    except OSError:
        return False
    return True
