"""Every quantized model prepared once: built from its source (build.py), saved in the
cache, and mapped from there at every later run (prepared.py).

Where things live: the embedded pair in its own cache folders (defaults.py); any other
model in `<cache>/models/prepared/<name>-<key>/`, where key hashes the source's identity
(its path, size, modification time and the first MiB of its bytes, where a GGUF keeps its
header), so a file changed or replaced in place is prepared again. A GGUF's folder also
keeps its config, generation config and tokenizer, read from the file once (a 151k-token
vocabulary takes seconds to read); a save_pretrained folder or a hub snapshot keeps its own.
A new version of a source replaces the folder of the old one (claim).

One process prepares a model at a time (defaults.preparing's lock); another that asks for
the same model waits, then maps the file the first one wrote. `specbench clear-cache`
removes it all.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from specbench import paths
from specbench.errors import ModelError
from specbench.models import build, defaults
from specbench.models.prepared import load_prepared, prepared_path, save_prepared
from specbench.models.progress import Progress
from specbench.models.specs import ModelSpec
from specbench.speed.gguf_blocks import Q4K
from specbench.speed.gguf_file import release_readers

NOT_LOCAL = "not in the local Hugging Face cache (specbench never downloads; set HF_HOME or give a local folder)"
HEADER_BYTES = 1 << 20  # hashed into a source's key: a GGUF's header, a shard's start
SOURCE_FILE = "source.txt"  # in a prepared folder: the resolved path of what it was prepared from


def source_key(spec: ModelSpec, files: list[Path]) -> str:
    """16 hex digits naming a source's current bytes: identity (path, size, mtime) and the
    first HEADER_BYTES of each weights file."""
    digest = hashlib.sha256((spec.identity() or spec.source).encode())
    for file in files:
        with open(file, "rb") as handle:
            digest.update(handle.read(HEADER_BYTES))
    return digest.hexdigest()[:16]


def weight_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def hub_folder(repo_id: str, role: str) -> Path:
    """The local snapshot of a hub id (nothing is downloaded); ModelError when absent."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        raise ModelError(f"cannot load {role} {repo_id}: {NOT_LOCAL}") from None


def cache_folder(spec: ModelSpec, source: Path) -> Path:
    """The cache folder of a model a user brings (source: its GGUF file or weights folder)."""
    files = [source] if source.is_file() else weight_files(source)
    if not files:
        raise ModelError(
            f"{spec.source} has no .safetensors weights to quantize; "
            "give a model saved with safetensors, a .gguf file, or --dtype float32"
        )
    stem = re.sub(r"[^\w.-]+", "-", source.stem if source.is_file() else source.name)[:48]
    return paths.models_dir() / "prepared" / f"{stem}-{source_key(spec, files)}"


def claim(cache: Path, source: Path) -> None:
    """Record which source the prepared folder `cache` holds, and delete the folders prepared
    from earlier versions of the same source: a file rewritten in place gets a new key, and
    its old prepared copy (gigabytes, for a large model) would stay until clear-cache."""
    cache.mkdir(parents=True, exist_ok=True)
    marker = str(source.resolve())
    (cache / SOURCE_FILE).write_text(marker)
    for other in cache.parent.iterdir():
        recorded = other / SOURCE_FILE
        if other != cache and recorded.is_file() and recorded.read_text() == marker:
            shutil.rmtree(other, ignore_errors=True)


# ---------------------------------------------------------------------------- metadata


def gguf_metadata(path: Path, folder: Path, extra_eos_ids: tuple[int, ...] = ()) -> None:
    """Write the GGUF file's config, generation config and tokenizer into folder (once)."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    if (folder / "config.json").is_file():
        return
    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    generation = GenerationConfig.from_model_config(config)
    defaults.add_eos(generation, extra_eos_ids)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except (OSError, ValueError, KeyError, TypeError, ImportError):
        tokenizer = None  # model.py says so, where a tokenizer is required
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    generation.save_pretrained(str(folder))
    config.save_pretrained(str(folder))  # last: its presence says the folder is complete


# ---------------------------------------------------------------------------- the model


def prepared_model(
    source: Callable[[], Path],
    meta_folder: Path,
    cache: Path,
    role: str,
    dtype: str,
    name: str,
    progress: Progress,
    keep_source: bool = True,
):
    """The model in run format (role, dtype): mapped from cache if prepared there, else
    built from source() (a GGUF file or a safetensors folder, asked for only then), saved
    there and mapped. meta_folder holds its config; keep_source=False deletes a GGUF once
    prepared (the embedded pair's, which its parts rebuild)."""
    path = prepared_path(cache, role, dtype)
    model = load_prepared(str(meta_folder), path)
    if model is not None:
        return model
    task = f"waiting for another specbench run to prepare the {role} {name}"
    waited = []
    cache.mkdir(parents=True, exist_ok=True)
    with defaults.preparing(cache, on_wait=lambda: waited.append(progress(task, 0, None))):
        if waited:
            progress(task, 1, 1)
        model = load_prepared(str(meta_folder), path)
        if model is None:
            found = source()
            _prepare(found, meta_folder, path, build.RunFormat(role, dtype), name, progress)
            if not keep_source:
                found.unlink(missing_ok=True)
            model = load_prepared(str(meta_folder), path)
    if model is None:
        raise ModelError(
            f"the prepared {role} {path} could not be read back; run `specbench clear-cache` and try again"
        )
    return model


def _prepare(source: Path, meta_folder: Path, path: Path, run: build.RunFormat, name: str, progress: Progress) -> None:
    """Build the model one tensor at a time and save it at path."""
    from transformers import AutoConfig

    task = f"preparing the {run.dtype} {run.role} {name} (once)"
    progress(task, 0, None)
    config = AutoConfig.from_pretrained(str(meta_folder))
    model = build.empty_model(config, run.float_dtype)
    if source.is_file():
        tensors, total = build.gguf_tensors(source, model, build.processor_config(source))
    else:
        tensors, total = build.safetensors_tensors(source)
    model = build.build(
        model, tensors, run, name, progress=lambda done, count: progress(task, done, count), total=total
    )
    release_readers()
    if run.keeps_blocks and not any(type(m).__name__ in ("Q4KLinear", "Q6KLinear") for m in model.modules()):
        raise ModelError(f"--dtype {Q4K}: no layer of {name} is stored as Q4_K; use --dtype auto, int8 or float32")
    save_prepared(model, path)
    del model
    gc.collect()
    _return_freed_memory()
    progress(task, 1, 1)


def _return_freed_memory() -> None:
    """Hand the built model's freed memory back to the system before the prepared file is
    mapped: glibc keeps freed blocks for reuse, so the built copy would otherwise stay
    counted (about 1 GB of a 7B's first run) beside the mapped one."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to trim
        return
    libc.malloc_trim(0)
