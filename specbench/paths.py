"""Where specbench keeps what it writes: the cache folder and its subfolders.

The bottom of the package (it imports nothing from specbench), so that the kernel builder, the
model cache and the cost cache all name their folders from one place, and `clear-cache` knows
every folder that is specbench's own.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SPECBENCH_CACHE"


def cache_root() -> Path:
    """The cache folder: $SPECBENCH_CACHE, else ~/.cache/specbench."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specbench"


def models_dir() -> Path:
    """Cached and prepared models."""
    return cache_root() / "models"


def costs_dir() -> Path:
    """Measured forward costs, by model pair and settings."""
    return cache_root() / "costs"


def native_dir() -> Path:
    """specbench's kernels, compiled for this CPU."""
    return cache_root() / "native"


def own_dirs() -> tuple[Path, ...]:
    """Every subfolder specbench writes in the cache: all that clear_cache removes."""
    return models_dir(), costs_dir(), native_dir()
