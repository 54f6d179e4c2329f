"""Loading models from a spec, checking that a pair can work together: ONE pair loader.

This module owns model loading (dtype, device, kernels), pairing (a drafter with the
target's vocabulary drafts ids; one with another tokenizer drafts through text, or the pair
is refused with one line) and end-of-sequence ids; `generate`, the sweep and the bench scripts all load through load_pair.
What a spec names is specs.py's. It names no model (defaults.py does), prints nothing, and
knows nothing about the command line: progress goes through a callback, and the CLI draws it.
"""

from __future__ import annotations

import functools
import hashlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.core.attention import use_row_invariant_attention
from specbench.core.generate import context_limit, model_device
from specbench.drafters import Drafter, make_drafter, parse_early_exit, uses_model
from specbench.drafters.early_exit import EarlyExitModel
from specbench.drafters.translated import TextCodec, check_translatable
from specbench.errors import ModelError, OptionError, VocabMismatch, reraise_as
from specbench.models import build, defaults
from specbench.models.prepare import cache_folder, claim, gguf_metadata, hub_folder, prepared_model
from specbench.models.specs import (
    DEFAULT,
    NONE,
    ModelSpec,
    check_device,
    check_draft_vocab,
    drafter_kind,
    parse_model_spec,
)
from specbench.speed.draft_vocab import output_head
from specbench.speed.gguf_blocks import Q4K, q4k_why_not
from specbench.speed.gguf_file import one_reader_per_file
from specbench.speed.kernels import use_kernels
from specbench.speed.lean_step import use_lean_forward
from specbench.speed.quantize import INT8, int8_available, target_int8_why_not

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
AUTO = "auto"


# ---------------------------------------------------------------------------- dtypes


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name.lower()]
    except KeyError:
        raise ModelError(f"unknown dtype {name!r}; choose from auto, float32, bfloat16, float16, int8, q4k") from None


def resolve_target_dtype(name: str, device: str, target: str = DEFAULT) -> str:
    """The target dtype "auto" stands for on a CPU where specbench's batch-invariant kernels
    build: q4k for a GGUF target (the default one included) with Q4_K layers, int8 for any
    other (quantize.Int8TargetLinear); float32 elsewhere. Other names unchanged."""
    if name.lower() != AUTO:
        return name
    if device != "cpu" or target_int8_why_not() is not None:
        return "float32"
    return Q4K if q4k_why_not() is None and has_q4k_layers(target) else INT8


def has_q4k_layers(target: str) -> bool:
    """Whether a model spec names a GGUF file with Q4_K tensors (False for anything else,
    and for a file that cannot be read: loading it will say why)."""
    try:
        spec = parse_model_spec(target)
    except (ModelError, OptionError):
        return False
    if spec.kind == DEFAULT:
        return defaults.TARGET.q4k_layers
    if spec.kind != "gguf":
        return False
    from specbench.speed.gguf_file import Q4_K, read_tensor_index

    try:
        return any(t.type == Q4_K and len(t.shape) == 2 for t in read_tensor_index(spec.source).tensors)
    except (OSError, ValueError):
        return False


def parse_target_dtype(name: str, device: str) -> torch.dtype:
    """The dtype a target computes in; int8 (quantize.Int8TargetLinear) and q4k (a GGUF's own
    Q4_K and Q6_K blocks, gguf_blocks.Q4KLinear and Q6KLinear, int8 for any other layers),
    both batch-invariant, compute in float32 (models/build.py builds them one tensor at a
    time) and need specbench's AVX2 kernels on a CPU."""
    if name.lower() not in (INT8, Q4K):
        return parse_dtype(name)
    if device != "cpu":
        raise ModelError(f"--dtype {name.lower()} runs on the CPU only, not on {device}")
    if (why := target_int8_why_not() or (q4k_why_not() if name.lower() == Q4K else None)) is not None:
        raise ModelError(f"--dtype {name.lower()}: {why}")
    return torch.float32


def resolve_draft_dtype(name: str, device: str) -> str:
    """The drafter dtype "auto" stands for: on the CPU, q4k where specbench's Q4_K kernel
    runs (with PyTorch's int8 kernel, for the head), else int8 where PyTorch has its int8
    weight-only kernel; bfloat16 otherwise (a GPU, device "auto"); other names unchanged."""
    if name.lower() != AUTO:
        return name
    if device != "cpu" or not int8_available():
        return "bfloat16"
    return Q4K if q4k_why_not() is None else INT8


def parse_draft_dtype(name: str, device: str) -> torch.dtype:
    """The dtype a drafter computes in: bf16 for int8 (weight-only, quantize.py) and for q4k
    (its decoder layers as Q4_K blocks quantized by gguf_blocks.quantize_q4k, its head
    int8; models/build.py)."""
    if name.lower() not in (INT8, Q4K):
        return parse_dtype(name)
    if device != "cpu":
        raise ModelError(f"--draft-dtype {name.lower()} runs on the CPU only, not on {device}")
    if not int8_available():
        raise ModelError(f"--draft-dtype {name.lower()}: this PyTorch build has no int8 weight-only kernel")
    if name.lower() == Q4K:
        if (why := q4k_why_not()) is not None:
            raise ModelError(f"--draft-dtype q4k: {why}")
    return torch.bfloat16


# ---------------------------------------------------------------------------- loading


@dataclass
class LoadedModel:
    model: object  # a transformers causal LM, in eval mode
    tokenizer: object | None  # None only for a drafter saved without one
    spec: ModelSpec
    name: str  # what to call it in output
    tokenizer_digest: str | None = None  # sha256 of its local tokenizer files (None: not local)


Progress = defaults.Progress


def load_model(
    spec: ModelSpec,
    *,
    role: str,
    dtype: str,
    device: str = "cpu",
    progress: Progress = defaults._no_progress,
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
    torch_dtype = parse_draft_dtype(dtype, device) if role == "drafter" else parse_target_dtype(dtype, device)
    check_device(device)
    if dtype.lower() in (INT8, Q4K):  # a CPU run format: built one tensor at a time, prepared once (prepare.py)
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

    torch_dtype = parse_draft_dtype(dtype, device) if role == "drafter" else parse_target_dtype(dtype, device)
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
    if dtype.lower() in (INT8, Q4K):
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
            f"cannot load {role} {name}: a {config.model_type} encoder attends both ways, so it cannot decode left to right (its config says is_decoder false)"
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
        return "not in the local Hugging Face cache (specbench never downloads; set HF_HOME or give a local folder)"
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def quiet_transformers() -> None:
    """Silence transformers' own progress bars and warnings (callers show their own progress)."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


# ---------------------------------------------------------------------------- pairing


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
            f"vocabularies differ: the target {target.name} scores {t_width} token ids, the drafter {drafter.name} {d_width}"
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
            f"EOS differs: target {target.tokenizer.eos_token!r} (id {t_eos}), drafter {drafter.tokenizer.eos_token!r} (id {d_eos})"
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


# ---------------------------------------------------------------------------- a pair, ready to run


@dataclass(frozen=True)
class PairConfig:
    target: str = DEFAULT  # a model spec
    drafter: str = DEFAULT  # a model spec, "none", or a drafter name (see drafter_kind)
    dtype: str = defaults.DEFAULT_DTYPE  # target weights; "auto" is resolved on creation
    draft_dtype: str = defaults.DEFAULT_DRAFT_DTYPE  # drafter weights; "auto" is resolved on creation
    device: str = "cpu"  # cpu, cuda, mps or auto
    draft_vocab: int = defaults.DEFAULT_DRAFT_VOCAB  # a model drafter scores ids below it (+ prompt, EOS); 0: all
    lookup: bool = defaults.DEFAULT_LOOKUP  # a model drafter copies from the context when it can ("model+lookup")
    random_weights: bool = False  # both models from their configs with random weights, no tokenizers (load_model)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", resolve_target_dtype(self.dtype, self.device, self.target))
        object.__setattr__(self, "draft_dtype", resolve_draft_dtype(self.draft_dtype, self.device))


@dataclass
class LoadedPair:
    target: LoadedModel
    drafter_model: LoadedModel | None  # set when the drafter is a model
    drafter_name: str  # "none", "model", a drafter name from DRAFTERS, or "early-exit:N"
    draft_vocab: int = 0  # the model drafter's vocabulary limit (draft_vocab.py); 0: all ids
    lookup: bool = False  # the model drafter copies from the context when it can ("model+lookup")
    translated: bool = False  # the drafter model has another tokenizer: drafts go through text

    @property
    def tokenizer(self):
        return self.target.tokenizer

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return eos_token_ids(self.target.model, self.target.tokenizer)

    @property
    def context_limit(self) -> int:
        return context_limit(self.target.model)

    @property
    def translation(self) -> tuple | None:
        """make_drafter's translate argument: (drafter tokenizer, target tokenizer, target
        logits width) for a drafter with another tokenizer, else None."""
        if not self.translated:
            return None
        return (self.drafter_model.tokenizer, self.target.tokenizer, output_vocab_size(self.target.model))

    @property
    def drafting_model(self):
        """The model whose forward drafts: the drafter model, the target's first N layers
        for early-exit:N (costs.py times it as a drafter), or None (no model drafts)."""
        if self.drafter_model is not None:
            return self.drafter_model.model
        layers = parse_early_exit(self.drafter_name) if self.drafter_name != NONE else None
        return EarlyExitModel(self.target.model, layers) if layers is not None else None

    @property
    def mapping(self) -> str:
        """How the drafter maps to the target, in a few words (for the trace and --json)."""
        return drafter_mapping(self.drafter_name, self.translated, self.target.model)

    def new_drafter(self) -> Drafter | None:
        """A fresh drafter for one generation (None: plain decoding)."""
        if self.drafter_name == NONE:
            return None
        model = self.drafter_model.model if self.drafter_model is not None else None
        name = "model+lookup" if self.lookup and self.drafter_name == "model" else self.drafter_name
        with reraise_as(ModelError):
            return make_drafter(
                name,
                model,
                self.draft_vocab,
                self.eos_token_ids,
                target_model=self.target.model,
                translate=self.translation,
            )

    def use_kernels(self, kernels: str) -> None:
        """Swap both models' Linear kernels (speed.kernels; float CPU layers only); a choice
        this machine cannot run raises OptionError."""
        with reraise_as(OptionError):
            for loaded in (self.target, self.drafter_model):
                if loaded is not None:
                    use_kernels(loaded.model, kernels)


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


def validate_pair_config(config: PairConfig) -> None:
    """Cheap checks before anything loads: specs parse, dtypes and device exist."""
    parse_model_spec(config.target)
    parse_target_dtype(config.dtype, config.device)
    check_device(config.device)
    parse_draft_dtype(config.draft_dtype, config.device)
    check_draft_vocab(config.draft_vocab)
    if uses_model(config.drafter.strip()):
        raise ModelError(
            f"--drafter {config.drafter.strip()}: give the drafter model instead (default, a folder, a .gguf file or a hub id); --lookup/--no-lookup says whether it copies from the context"
        )
    if drafter_kind(config.drafter) == "model":
        parse_model_spec(config.drafter)


def load_pair(config: PairConfig, progress: Progress = defaults._no_progress) -> LoadedPair:
    """Load the target and, if the drafter is a model, the drafter; pair them (translates).
    An early-exit drafter is checked against the target now (ModelError)."""
    validate_pair_config(config)
    target = load_model(
        parse_model_spec(config.target),
        role="target",
        dtype=config.dtype,
        device=config.device,
        progress=progress,
        random_weights=config.random_weights,
    )
    kind = drafter_kind(config.drafter)
    if kind != "model":
        pair = LoadedPair(target, None, kind)
        if parse_early_exit(kind) is not None:
            pair.new_drafter()  # a target that cannot exit early, or a bad N, fails now
        return pair
    drafter, translated = load_drafter(config, target, config.drafter, progress)
    return LoadedPair(target, drafter, "model", 0 if translated else config.draft_vocab, config.lookup, translated)


def load_drafters(
    config: PairConfig, target: LoadedModel, specs: list[str], kernels: str, progress: Progress = defaults._no_progress
) -> list[tuple[LoadedModel, bool]]:
    """More drafter models beside a loaded target (a sweep comparing several): each as
    load_drafter gives it, on the Linear kernels the pair uses (OptionError if not here)."""
    loaded = []
    for spec in specs:
        drafter, translated = load_drafter(config, target, spec, progress)
        with reraise_as(OptionError):
            use_kernels(drafter.model, kernels)
        loaded.append((drafter, translated))
    return loaded


def load_drafter(
    config: PairConfig, target: LoadedModel, spec: str, progress: Progress = defaults._no_progress
) -> tuple[LoadedModel, bool]:
    """Load drafter model `spec` beside a loaded target, with config's drafter dtype, and
    pair it: (the drafter, whether its drafts are translated through text; translates)."""
    # "auto" spreads the target; the drafter goes where the target's inputs go
    device = str(model_device(target.model)) if config.device == "auto" else config.device
    drafter = load_model(
        parse_model_spec(spec),
        role="drafter",
        dtype=config.draft_dtype,
        device=device,
        progress=progress,
        require_tokenizer=False,
        share_tokenizer_with=target,
        random_weights=config.random_weights,
    )
    translated = translates(target, drafter)
    if config.draft_vocab and not translated:
        with reraise_as(ModelError):
            output_head(drafter.model)  # the restricted head needs a plain one
    return drafter, translated
