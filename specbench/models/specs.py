"""What a user names: model specs, drafter specs, devices, kernels; each checked here, once.

A model spec is one string:
    "default"          the embedded pair (defaults.py builds and caches it)
    a local folder     written by save_pretrained (config.json inside)
    a .gguf file       dequantized by transformers on load
    a Hugging Face id  "org/name", from the local Hugging Face cache only (never downloads)
A drafter spec is a model spec (with the target's tokenizer or another one), "none" (plain
decoding), a drafter name from drafters.DRAFTERS other than "model" (e.g. an n-gram
drafter, which needs no model), or "early-exit:N" (the target's own first N layers).

Nothing here loads a model; a bad name raises ModelError or OptionError (errors.py) with a
one-line message that lists the choices. Dtype names are dtypes.py's (they decide how weights
load); the options' defaults are options.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.drafters import DRAFTERS, parse_early_exit, uses_model
from specbench.errors import ModelError, OptionError
from specbench.speed.kernels import KERNELS

DEVICES = ("cpu", "cuda", "mps", "auto")  # auto: accelerate's device_map="auto" for the target
NONE = "none"  # drafter spec for plain decoding
DEFAULT = "default"  # model spec for the embedded pair

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True)
class ModelSpec:
    kind: str  # "default", "dir", "gguf" or "hub"
    source: str  # the folder, the .gguf file or the hub id; "default" for the embedded pair

    def __str__(self) -> str:
        return self.source

    def identity(self) -> str | None:
        """What tells a local folder or file apart from others with the same name, for caches
        keyed by it: its absolute path, size and modification time (a checkpoint rewritten
        in place is another model). None for the embedded pair and a hub id: their names do."""
        path = Path(self.source)
        if self.kind not in ("dir", "gguf") or not path.exists():
            return None
        files = [f for f in path.iterdir() if f.is_file()] if path.is_dir() else [path]
        stats = [f.stat() for f in files]
        return f"{path.resolve()}:{sum(st.st_size for st in stats)}:{max((st.st_mtime_ns for st in stats), default=0)}"


def parse_model_spec(spec: str) -> ModelSpec:
    """What a model spec names; a clear error for a path that does not exist."""
    spec = spec.strip()
    if not spec:
        raise ModelError("empty model spec")
    if spec == DEFAULT:
        return ModelSpec(DEFAULT, DEFAULT)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{spec} is a folder without config.json, not a model saved with save_pretrained")
        return ModelSpec("dir", str(path))
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelError(f"{spec} is a file but not a .gguf model; give a .gguf file, a model folder or a hub id")
        return ModelSpec("gguf", str(path))
    if _looks_like_path(spec):
        raise ModelError(f"no such model file or folder: {spec}")
    if not _HUB_ID.match(spec):
        raise ModelError(f"{spec!r} is not a model path, a Hugging Face id (org/name) or 'default'")
    return ModelSpec("hub", spec)


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", ".", "~")) or spec.lower().endswith(".gguf") or spec.count("/") > 1 or "\\" in spec


def drafter_kind(spec: str) -> str:
    """ "none", a drafter name that needs no drafter model (ngram, prompt-lookup,
    early-exit:N), or "model" for a model spec; a bad early-exit:N raises OptionError."""
    spec = spec.strip()
    if spec == NONE:
        return NONE
    if spec in DRAFTERS and not uses_model(spec):
        return spec
    try:
        if parse_early_exit(spec) is not None:
            return spec
    except ValueError as error:
        raise OptionError(str(error)) from None
    return "model"


def check_device(device: str) -> str:
    """The device name if this machine has it; a clear error otherwise ("cuda:1" is fine)."""
    kind = device.split(":")[0]
    if kind not in DEVICES or (kind != device and kind not in ("cuda", "mps")):
        raise ModelError(f"unknown device {device!r}; choose from {', '.join(DEVICES)}")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"--device {device}: PyTorch sees no CUDA device on this machine")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ModelError(f"--device {device}: PyTorch sees no Apple MPS device on this machine")
    return device


def check_names(names: tuple[str, ...] | list[str], known: tuple[str, ...], what: str) -> None:
    """At least one name, each one of `known` (drafters, gamma policies, kernels...)."""
    if not names:
        raise OptionError(f"choose at least one {what} ({', '.join(known)})")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise OptionError(f"unknown {what} {', '.join(map(repr, unknown))}; choose from {', '.join(known)}")


def check_kernels(kernels: str) -> str:
    """A --kernels value (speed.kernels.KERNELS); whether this torch has oneDNN is use_kernels'."""
    check_names((kernels,), KERNELS, "kernels")
    return kernels


def check_draft_vocab(draft_vocab: int) -> int:
    """A --draft-vocab value: the model drafter scores ids below it; 0 scores every id."""
    if draft_vocab < 0:
        raise OptionError(f"--draft-vocab must be >= 0 (0 scores every id), got {draft_vocab}")
    return draft_vocab
