"""Loading models from a spec, checking that a pair can work together, and setting up a run.

A model spec is one string:
    "default"          the embedded pair (defaults.py builds and caches it)
    a local folder     written by save_pretrained (config.json inside)
    a .gguf file       dequantized by transformers on load
    a Hugging Face id  "org/name", from the local Hugging Face cache only (never downloads)
A drafter spec is a model spec, "none" (plain decoding), or a drafter name from
drafters.DRAFTERS other than "model" (e.g. an n-gram drafter, which needs no model).

This module owns model loading (dtype, device), the vocabulary check, prompt encoding with the
chat template, end-of-sequence ids, incremental detokenizing, and one function that runs a
generation with the right engine. It names no model (defaults.py does), prints nothing, and
knows nothing about the command line: progress goes through a callback.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from specbench.errors import ModelError, PromptError, VocabMismatch
from specbench.models import defaults
from specbench.core.generate import GenerationConfig, GenerationResult, check_prompt, context_limit, model_device, plain_generate, speculative_generate
from specbench.speed.draft_vocab import output_head
from specbench.drafters import DRAFTERS, Drafter, make_drafter, uses_model
from specbench.policies import GammaPolicy
from specbench.speed.quantize import INT8, int8_available, quantize_linears
from specbench.core.stats import StepRecord

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
DEVICES = ("cpu", "cuda", "mps", "auto")  # auto: accelerate's device_map="auto" for the target
NONE = "none"  # drafter spec for plain decoding
DEFAULT = "default"  # model spec for the embedded pair

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


# ---------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class ModelSpec:
    kind: str  # "default", "dir", "gguf" or "hub"
    source: str  # the folder, the .gguf file or the hub id; "default" for the embedded pair

    def __str__(self) -> str:
        return self.source


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
    """"none", a model-free drafter name from DRAFTERS, or "model" for a model spec."""
    spec = spec.strip()
    if spec == NONE:
        return NONE
    if spec in DRAFTERS and not uses_model(spec):
        return spec
    return "model"


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name.lower()]
    except KeyError:
        if name.lower() == INT8:
            raise ModelError("int8 is a drafter dtype (--draft-dtype int8): a target's one- and several-token forwards must round alike") from None
        raise ModelError(f"unknown dtype {name!r}; choose from float32, bfloat16, float16") from None


AUTO = "auto"


def resolve_draft_dtype(name: str, device: str) -> str:
    """The drafter dtype "auto" stands for: int8 on the CPU when PyTorch has its int8
    weight-only kernel, bfloat16 otherwise (a GPU, device "auto"); other names unchanged."""
    if name.lower() != AUTO:
        return name
    return INT8 if device == "cpu" and int8_available() else "bfloat16"


def parse_draft_dtype(name: str, device: str) -> torch.dtype:
    """The dtype a drafter loads in; int8 (weight-only, quantize.py) loads bf16 first."""
    if name.lower() != INT8:
        return parse_dtype(name)
    if device != "cpu":
        raise ModelError(f"--draft-dtype int8 runs on the CPU only, not on {device}")
    if not int8_available():
        raise ModelError("--draft-dtype int8: this PyTorch build has no int8 weight-only kernel")
    return torch.bfloat16


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
) -> LoadedModel:
    """Load a causal LM and its tokenizer from a spec. role is "target" or "drafter".

    device "auto" spreads the model with accelerate (device_map="auto"); other devices load
    the whole model there. share_tokenizer_with: a model whose tokenizer is reused when its
    tokenizer files are byte-identical to this one's (the default pair's are; it saves ~1.5 s).
    """
    torch_dtype = parse_draft_dtype(dtype, device) if role == "drafter" else parse_dtype(dtype)
    check_device(device)
    folder, kwargs, name = _locate(spec, role, progress)
    task = f"loading {role} {name} ({dtype})"
    progress(task, 0, None)
    model = _load_weights(folder, kwargs, torch_dtype, device, role, name)
    if dtype.lower() == INT8:
        quantize_linears(model)
    digest = tokenizer_digest(folder) if "gguf_file" not in kwargs else None
    shared = share_tokenizer_with
    if shared is not None and digest is not None and shared.tokenizer_digest == digest:
        tokenizer = shared.tokenizer
    else:
        tokenizer = _load_tokenizer(folder, kwargs, role, name, required=require_tokenizer)
    progress(task, 1, 1)
    return LoadedModel(model, tokenizer, spec, name, digest)


def _locate(spec: ModelSpec, role: str, progress: Progress) -> tuple[str, dict, str]:
    """(folder or id for from_pretrained, extra kwargs, display name)."""
    if spec.kind == DEFAULT:
        embedded = defaults.TARGET if role == "target" else defaults.DRAFTER
        try:
            folder = defaults.ensure_cached(embedded, progress)
        except defaults.DefaultModelError as error:
            raise ModelError(str(error)) from error
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
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **kwargs, **placement)
    except (OSError, ValueError, KeyError, ImportError) as error:
        raise ModelError(f"cannot load {role} {name}: {_first_line(error, kwargs)}") from error
    return model.eval()


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
    """sha256 over a local folder's tokenizer files; None if it is not a local folder or has none."""
    local = Path(folder)
    if not local.is_dir():
        return None
    digest, found = hashlib.sha256(), False
    for name in (*TOKENIZER_FILES, "special_tokens_map.json", "added_tokens.json", "merges.txt", "chat_template.jinja"):
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
        raise VocabMismatch(f"vocabularies differ: the target {target.name} scores {t_width} token ids, the drafter {drafter.name} {d_width}")
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
    dtype: str = defaults.DEFAULT_DTYPE  # target weights
    draft_dtype: str = defaults.DEFAULT_DRAFT_DTYPE  # drafter weights; "auto" is resolved on creation
    device: str = "cpu"  # cpu, cuda, mps or auto
    draft_vocab: int = defaults.DEFAULT_DRAFT_VOCAB  # a model drafter scores ids below it (+ prompt, EOS); 0: all
    lookup: bool = defaults.DEFAULT_LOOKUP  # a model drafter copies from the context when it can ("model+lookup")

    def __post_init__(self) -> None:
        object.__setattr__(self, "draft_dtype", resolve_draft_dtype(self.draft_dtype, self.device))


@dataclass
class LoadedPair:
    target: LoadedModel
    drafter_model: LoadedModel | None  # set when the drafter is a model
    drafter_name: str  # "none", "model", or a drafter name from DRAFTERS
    draft_vocab: int = 0  # the model drafter's vocabulary limit (draft_vocab.py); 0: all ids
    lookup: bool = False  # the model drafter copies from the context when it can ("model+lookup")

    @property
    def tokenizer(self):
        return self.target.tokenizer

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return eos_token_ids(self.target.model, self.target.tokenizer)

    @property
    def context_limit(self) -> int:
        return context_limit(self.target.model)

    def new_drafter(self) -> Drafter | None:
        """A fresh drafter for one generation (None: plain decoding)."""
        if self.drafter_name == NONE:
            return None
        model = self.drafter_model.model if self.drafter_model is not None else None
        name = "model+lookup" if self.lookup and self.drafter_name == "model" else self.drafter_name
        return make_drafter(name, model, self.draft_vocab, self.eos_token_ids)


def validate_pair_config(config: PairConfig) -> None:
    """Cheap checks before anything loads: specs parse, dtypes and device exist."""
    parse_model_spec(config.target)
    parse_dtype(config.dtype)
    check_device(config.device)
    parse_draft_dtype(config.draft_dtype, config.device)
    if config.draft_vocab < 0:
        raise ModelError(f"--draft-vocab must be >= 0 (0 scores every id), got {config.draft_vocab}")
    if uses_model(config.drafter.strip()):
        raise ModelError(f"--drafter {config.drafter.strip()}: give the drafter model instead (default, a folder, a .gguf file or a hub id); --lookup/--no-lookup says whether it copies from the context")
    if drafter_kind(config.drafter) == "model":
        parse_model_spec(config.drafter)


def load_pair(config: PairConfig, progress: Progress = defaults._no_progress) -> LoadedPair:
    """Load the target and, if the drafter is a model, the drafter; check their vocabularies."""
    validate_pair_config(config)
    target = load_model(parse_model_spec(config.target), role="target", dtype=config.dtype, device=config.device, progress=progress)
    kind = drafter_kind(config.drafter)
    if kind != "model":
        return LoadedPair(target, None, kind)
    # "auto" spreads the target; the drafter goes where the target's inputs go
    device = str(model_device(target.model)) if config.device == "auto" else config.device
    drafter = load_model(
        parse_model_spec(config.drafter),
        role="drafter",
        dtype=config.draft_dtype,
        device=device,
        progress=progress,
        require_tokenizer=False,
        share_tokenizer_with=target,
    )
    check_vocab(target, drafter)
    if config.draft_vocab:
        try:
            output_head(drafter.model)
        except ValueError as exc:
            raise ModelError(str(exc)) from None
    return LoadedPair(target, drafter, "model", config.draft_vocab, config.lookup)


# ---------------------------------------------------------------------------- prompts and text


def encode_prompt(tokenizer, prompt: str, *, raw: bool = False) -> list[int]:
    """Prompt ids: the chat template with one user turn (unless raw or there is none)."""
    if not prompt.strip():
        raise PromptError("the prompt is empty")
    if raw or not getattr(tokenizer, "chat_template", None):
        return list(tokenizer(prompt)["input_ids"])
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def check_prompt_fits(prompt_ids: list[int], limit: int) -> None:
    """decode.check_prompt's rule, raised as PromptError for the CLI's one-line errors."""
    try:
        check_prompt(len(prompt_ids), limit)
    except ValueError as exc:
        raise PromptError(str(exc)) from None


class TextStream:
    """Turns tokens into text as they arrive: push(ids) returns only the new text.

    Decodes the whole output each time (token boundaries can split characters and change
    spacing) and holds back text that ends inside a multi-byte character.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.shown = ""

    def push(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        return self._advance(text)

    def finish(self) -> str:
        """The rest of the text, a trailing partial character included."""
        return self._advance(self.tokenizer.decode(self.ids, skip_special_tokens=True))

    def _advance(self, text: str) -> str:
        new = text[len(self.shown) :] if text.startswith(self.shown) else ""
        self.shown = text
        return new


# ---------------------------------------------------------------------------- running


def run_generation(
    pair: LoadedPair,
    prompt_ids: list[int],
    config: GenerationConfig,
    policy: GammaPolicy | None,
    *,
    on_tokens: Callable[[list[int]], None] | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
) -> GenerationResult:
    """One generation: speculative with the pair's drafter, or plain when the drafter is "none".

    on_tokens gets the tokens appended to the output as they are accepted; on_step gets each
    StepRecord (speculative only).
    """
    check_prompt_fits(prompt_ids, pair.context_limit)
    decode = pair.tokenizer.decode if pair.tokenizer is not None else None
    drafter = pair.new_drafter()
    if drafter is None:
        on_token = (lambda token: on_tokens([token])) if on_tokens else None
        return plain_generate(pair.target.model, prompt_ids, config, decode=decode, on_token=on_token)

    def step(record: StepRecord) -> None:
        if on_step is not None:
            on_step(record)
        if on_tokens is not None:
            on_tokens(record.tokens)

    return speculative_generate(pair.target.model, drafter, prompt_ids, config, policy, decode=decode, on_step=step)
