"""One model from a spec: its weights in the dtype asked for, its tokenizer, its CPU target
forward. The pair loader (loading.py) calls load_model once for the target and once for each
drafter model.

A float dtype loads through transformers' from_pretrained; a CPU run format (int8, q4k) is
built one tensor at a time and prepared once into the cache (build.py, prepare.py), so no
dense copy is held first. A default spec loads the embedded pair's cached entry (defaults.py).
Sources that cannot be read become one-line ModelErrors here; progress goes through a
callback (progress.py), and nothing is printed.
"""

from __future__ import annotations

import functools
import hashlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.core.attention import use_row_invariant_attention
from specbench.core.generate import model_device
from specbench.errors import ModelError, OptionError
from specbench.models import build, defaults
from specbench.models.dtypes import RUN_FORMATS, has_q4k_layers, parse_role_dtype
from specbench.models.prepare import NOT_LOCAL, cache_folder, claim, gguf_metadata, hub_folder, prepared_model
from specbench.models.progress import Progress, no_progress
from specbench.models.specs import DEFAULT, ModelSpec, check_device
from specbench.speed.gguf_blocks import Q4K
from specbench.speed.gguf_file import one_reader_per_file
from specbench.speed.lean_step import use_lean_forward


@dataclass
class LoadedModel:
    model: object  # a transformers causal LM, in eval mode
    tokenizer: object | None  # None only for a drafter saved without one
    spec: ModelSpec
    name: str  # what to call it in output
    tokenizer_digest: str | None = None  # sha256 of its local tokenizer files (None: not local)


def load_model(
    spec: ModelSpec,
    *,
    role: str,
    dtype: str,
    device: str = "cpu",
    progress: Progress = no_progress,
    require_tokenizer: bool = True,
    share_tokenizer_with: LoadedModel | None = None,
    random_weights: bool = False,
) -> LoadedModel:
    """Load a causal LM and its tokenizer from a spec. role is "target" or "drafter".

    device "auto" spreads the model with accelerate (device_map="auto"); other devices load
    the whole model there. share_tokenizer_with: a model whose tokenizer is reused when its
    tokenizer files are byte-identical to this one's (the default pair's are; a large
    tokenizer takes seconds to load). A CPU target's sdpa attention becomes core.attention's
    row-invariant one, so its verify forwards give the logits its decoding steps give (on a
    GPU the dense kernels round by batch anyway, and a call per row costs launches); then its
    forwards over a cache take speed.lean_step's forward, which gives the same bits faster.
    random_weights: the model of the spec's config with random weights and no tokenizer,
    in the same dtype and kernels (what a forward costs does not depend on the weights'
    values: `specbench costs --random-weights`); a q4k target's layers are then random
    Q4_K blocks, its head Q6_K, as in a Q4_K_M file.
    """
    with one_reader_per_file():  # a GGUF's metadata parsed once, not for each of config, tokenizer, weights
        if random_weights:
            return _load_random(spec, role, dtype, device, progress)
        return _load_model(spec, role, dtype, device, progress, require_tokenizer, share_tokenizer_with)


def _load_model(
    spec: ModelSpec,
    role: str,
    dtype: str,
    device: str,
    progress: Progress,
    require_tokenizer: bool,
    share_tokenizer_with: LoadedModel | None,
) -> LoadedModel:
    torch_dtype = parse_role_dtype(role, dtype, device)
    check_device(device)
    if dtype.lower() in RUN_FORMATS:  # a CPU run format: built one tensor at a time, prepared once (prepare.py)
        folder, name, model = _load_prepared(spec, role, dtype.lower(), progress)
        kwargs = {}
    else:
        folder, kwargs, name = _locate(spec, role, progress)
        task = f"loading {role} {name} ({dtype})"
        progress(task, 0, None)
        model = _load_weights(folder, kwargs, torch_dtype, device, role, name)
        progress(task, 1, 1)
    _as_cpu_target(model, role)
    digest = tokenizer_digest(folder) if "gguf_file" not in kwargs else None
    shared = share_tokenizer_with
    if shared is not None and digest is not None and shared.tokenizer_digest == digest:
        tokenizer = shared.tokenizer
    else:
        tokenizer = _load_tokenizer(folder, kwargs, role, name, required=require_tokenizer)
    return LoadedModel(model, tokenizer, spec, name, digest)


def _as_cpu_target(model, role: str) -> None:
    """A CPU target's attention row by row and its forwards over a cache lean (see load_model)."""
    if role == "target" and model_device(model).type == "cpu":
        use_row_invariant_attention(model)  # a verify row's logits = a decoding step's, bit for bit
        use_lean_forward(model)  # the same bits, without HF's per-call plumbing


def _load_random(spec: ModelSpec, role: str, dtype: str, device: str, progress: Progress) -> LoadedModel:
    """load_model's random_weights: a CPU run format built one random tensor at a time
    (build.random_tensors), a float dtype built whole on its device."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch_dtype = parse_role_dtype(role, dtype, device)
    check_device(device)
    if device == "auto":
        raise OptionError("random weights go on one device: give --device cpu, cuda or mps")
    folder, kwargs, name = _locate(spec, role, progress, weights=False)
    task = f"building {role} {name} ({dtype}, random weights)"
    progress(task, 0, None)
    try:
        with _no_gguf_bar():
            config = AutoConfig.from_pretrained(folder, **kwargs)
    except (OSError, ValueError, KeyError, ImportError) as error:
        raise ModelError(f"cannot read the config of {role} {name}: {_first_line(error, kwargs)}") from error
    check_left_to_right(config, role, name)
    if dtype.lower() in RUN_FORMATS:
        run = build.RunFormat(role, dtype.lower())
        model = build.empty_model(config, run.float_dtype)
        model = build.build(model, build.random_tensors(model, run), run, name)
    else:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype).eval()
    _as_cpu_target(model, role)
    progress(task, 1, 1)
    return LoadedModel(model, None, spec, name, None)


def _load_prepared(spec: ModelSpec, role: str, dtype: str, progress: Progress) -> tuple[str, str, object]:
    """(the folder of its config and tokenizer, display name, the model) for a model in a
    CPU run format, mapped from its prepared file, which the first run builds (prepare.py)."""
    if dtype == Q4K and role == "target" and spec.kind not in (DEFAULT, "gguf"):  # refused before anything loads
        shown = spec.source if spec.kind == "hub" else Path(spec.source).name
        raise ModelError(f"--dtype q4k runs a GGUF file's Q4_K blocks; the target {shown} is not a .gguf file")
    if dtype == Q4K and role == "target" and not has_q4k_layers(spec.source):
        raise ModelError(
            f"--dtype q4k: no layer of {Path(spec.source).name} is stored as Q4_K; use --dtype auto, int8 or float32"
        )
    keep_source = True
    if spec.kind == DEFAULT:
        embedded = defaults.TARGET if role == "target" else defaults.DRAFTER
        meta = defaults.ensure_cached(embedded, progress, weights=False)  # DefaultModelError is a ModelError
        cache, name, keep_source = meta, embedded.name, False  # its parts rebuild the GGUF
        source = lambda: defaults.ensure_gguf(embedded, progress)  # noqa: E731 - assembled only to prepare
    elif spec.kind == "gguf":
        path = Path(spec.source)
        name, cache = path.name, cache_folder(spec, path)
        claim(cache, path)
        task = f"reading the config and tokenizer of {name} (once)"
        progress(task, 0, None)
        with _read_errors(role, name):
            gguf_metadata(path, cache)
        progress(task, 1, 1)
        meta, source = cache, lambda: path
    else:
        folder = hub_folder(spec.source, role) if spec.kind == "hub" else Path(spec.source)
        name = spec.source if spec.kind == "hub" else folder.name
        meta, cache = folder, cache_folder(ModelSpec("dir", str(folder)), folder)
        claim(cache, folder)
        source = lambda: folder  # noqa: E731
    task = f"loading {role} {name} ({dtype})"
    progress(task, 0, None)
    with _read_errors(role, name):
        model = prepared_model(source, meta, cache, role, dtype, name, progress, keep_source)
    check_left_to_right(model.config, role, name)
    progress(task, 1, 1)
    return str(meta), name, model


@contextmanager
def _read_errors(role: str, name: str, kwargs: dict | None = None):
    """A source that cannot be read, as one line (ModelError); kwargs: from_pretrained's, for
    naming a hub id missing from the local cache."""
    from struct import error as StructError  # a GGUF cut inside its header

    from safetensors import SafetensorError  # a cut or corrupt weights file

    damaged = (SafetensorError, StructError, EOFError)  # EOFError: a GGUF cut inside its tensors (build.py)
    try:
        yield
    except (OSError, ValueError, KeyError, ImportError, *damaged) as error:
        prefix = "its weights file looks cut short or corrupt: " if isinstance(error, damaged) else ""
        raise ModelError(f"cannot load {role} {name}: {prefix}{_first_line(error, kwargs or {})}") from error


def _locate(spec: ModelSpec, role: str, progress: Progress, weights: bool = True) -> tuple[str, dict, str]:
    """(folder or id for from_pretrained, extra kwargs, display name) of a model loaded dense;
    weights=False: a default model's cache entry need not hold its float32 weights."""
    if spec.kind == DEFAULT:
        embedded = defaults.TARGET if role == "target" else defaults.DRAFTER
        folder = defaults.ensure_cached(embedded, progress, weights)  # DefaultModelError is a ModelError
        return str(folder), {}, embedded.name
    if spec.kind == "gguf":
        path = Path(spec.source)
        return str(path.parent), {"gguf_file": path.name}, path.name
    if spec.kind == "hub":
        return spec.source, {"local_files_only": True}, spec.source
    return spec.source, {}, Path(spec.source).name


def _load_weights(folder: str, kwargs: dict, dtype: torch.dtype, device: str, role: str, name: str):
    from transformers import AutoModelForCausalLM

    placement = {} if device == "cpu" else {"device_map": device}
    with _read_errors(role, name, kwargs), _no_gguf_bar():
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **kwargs, **placement)
    check_left_to_right(model.config, role, name)
    return model.eval()


@contextmanager
def _no_gguf_bar():
    """transformers de-quantizes a GGUF file under a tqdm bar of its own, which its logging
    switch (quiet_transformers) does not reach; the loader's progress line already says what
    is loading. Left alone where a transformers release reads GGUF files otherwise."""
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is None:
        yield
        return
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar


def check_left_to_right(config, role: str, name: str) -> None:
    """Refuse an encoder loaded as a causal LM: transformers maps BERT-like checkpoints to
    their *LMHeadModel, which attends both ways unless the config says is_decoder, so it
    would "generate" text no left-to-right model wrote. Told by the model type having a
    masked-LM head in transformers and is_decoder false (BartForCausalLM and kin set it)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    if config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and getattr(config, "is_decoder", None) is False:
        raise ModelError(
            f"cannot load {role} {name}: a {config.model_type} encoder attends both ways, "
            "so it cannot decode left to right (its config says is_decoder false)"
        )


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def _load_tokenizer(folder: str, kwargs: dict, role: str, name: str, required: bool):
    """The tokenizer, or None when there is none and none is required.

    transformers builds an empty one-token tokenizer for a folder without tokenizer files
    instead of failing, so a missing tokenizer is detected here, not left to produce garbage.
    """
    from transformers import AutoTokenizer

    missing = f"{role} {name} has no tokenizer"
    local = Path(folder)
    if "gguf_file" not in kwargs and local.is_dir() and not any((local / f).is_file() for f in TOKENIZER_FILES):
        tokenizer = None
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
        except (OSError, ValueError, KeyError, TypeError, ImportError) as error:
            missing = f"cannot load the tokenizer of {role} {name}: {_first_line(error, kwargs)}"
            tokenizer = None
    if tokenizer is not None and len(tokenizer) < 2:
        tokenizer = None
    if tokenizer is None and required:
        raise ModelError(missing)
    return tokenizer


def tokenizer_digest(folder: str) -> str | None:
    """sha256 over the files of a local folder that decide how text becomes ids; None if it
    is not a local folder or has none. A separate chat_template.jinja is left out: only the
    target's template is ever applied (to the prompt), so a drafter whose template alone
    differs (the default pair's 0.5B) still shares the target's tokenizer object."""
    local = Path(folder)
    if not local.is_dir():
        return None
    digest, found = hashlib.sha256(), False
    for name in (*TOKENIZER_FILES, "special_tokens_map.json", "added_tokens.json", "merges.txt"):
        path = local / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes())
            found = True
    return digest.hexdigest() if found else None


def _first_line(error: Exception, kwargs: dict) -> str:
    if kwargs.get("local_files_only") and isinstance(error, OSError):
        return NOT_LOCAL
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def quiet_transformers() -> None:
    """Silence transformers' own progress bars and warnings (callers show their own progress)."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
