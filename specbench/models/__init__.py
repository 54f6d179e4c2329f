"""Models: specs, ONE pair loader (with progress), the embedded default pair, prompt encoding.

`from specbench import models; models.load_pair(...)` reads the names of loading.py; they are
imported on first use, so that `specbench --help` and the embedded pair's status stay fast.
"""

from __future__ import annotations

import importlib


def __getattr__(name: str):
    if name in ("defaults", "loading"):
        return importlib.import_module(f"specbench.models.{name}")
    return getattr(importlib.import_module("specbench.models.loading"), name)
