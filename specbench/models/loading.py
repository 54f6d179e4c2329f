"""ONE pair loader: a target and its drafter, loaded from a PairConfig and paired.

`generate`, the sweep and the bench scripts all load through load_pair. This module owns
the pair's options (PairConfig, whose "auto" dtypes are resolved on first read, so that
constructing one builds no kernel), the loaded pair (LoadedPair: a fresh drafter per
generation, the kernels swap) and the order of loading: checks first, then the target, then
each drafter model beside it. One model is model.py's, dtypes are dtypes.py's, pairing
checks are pairing.py's, what a spec names is specs.py's; the models are defaults.py's.
It prints nothing and knows nothing about the command line: progress goes through a
callback, and the CLI draws it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specbench.core.generate import context_limit, model_device
from specbench.drafters import Drafter, make_drafter, parse_early_exit, uses_model
from specbench.drafters.early_exit import EarlyExitModel
from specbench.drafters.model import keep_head
from specbench.errors import ModelError, OptionError, reraise_as
from specbench.models.dtypes import (
    AUTO,
    needs_kernels,
    parse_draft_dtype,
    parse_target_dtype,
    resolve_draft_dtype,
    resolve_target_dtype,
)
from specbench.models.model import LoadedModel, load_model
from specbench.models.options import DEFAULT_DRAFT_DTYPE, DEFAULT_DRAFT_VOCAB, DEFAULT_DTYPE, DEFAULT_LOOKUP
from specbench.models.pairing import drafter_mapping, eos_token_ids, output_vocab_size, translates
from specbench.models.progress import Progress, no_progress
from specbench.models.specs import DEFAULT, NONE, check_device, check_draft_vocab, drafter_kind, parse_model_spec
from specbench.models.text import template_head
from specbench.speed.draft_vocab import output_head
from specbench.speed.kernels import use_kernels
from specbench.speed.twins import add_twins, twins_pay


class ResolvedDtype:
    """A PairConfig dtype field: it keeps the name given and reads as the name that one stands
    for on the config's device (resolve(config, given): "auto" becomes a concrete dtype),
    resolved on the first read and kept. Resolving "auto" on a CPU builds specbench's
    kernels, so constructing a config (the CLI's defaults, a test's collection) compiles
    nothing; load_pair reads both under a progress line."""

    def __init__(self, default: str, resolve: Callable[[PairConfig, str], str]):
        self.default, self.resolve = default, resolve

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.given_key = name, f"_given_{name}"

    def __set__(self, config: PairConfig, value: str) -> None:
        config.__dict__[self.given_key] = value
        config.__dict__.pop(self.name, None)

    def __get__(self, config: PairConfig | None, owner: type | None = None) -> str:
        if config is None:
            return self.default  # the dataclass field's default
        if self.name not in config.__dict__:
            config.__dict__[self.name] = self.resolve(config, self.given(config))
        return config.__dict__[self.name]

    def given(self, config: PairConfig) -> str:
        """The name as given, not resolved."""
        return config.__dict__[self.given_key]

    def is_resolved(self, config: PairConfig) -> bool:
        return self.name in config.__dict__


@dataclass(frozen=True)
class PairConfig:
    target: str = DEFAULT  # a model spec
    drafter: str = DEFAULT  # a model spec, "none", or a drafter name (see drafter_kind)
    # target weights; "auto" is resolved on the first read (ResolvedDtype)
    dtype: str = ResolvedDtype(
        DEFAULT_DTYPE, lambda config, name: resolve_target_dtype(name, config.device, config.target)
    )
    # drafter weights; "auto" is resolved on the first read
    draft_dtype: str = ResolvedDtype(DEFAULT_DRAFT_DTYPE, lambda config, name: resolve_draft_dtype(name, config.device))
    device: str = "cpu"  # cpu, cuda, mps or auto
    draft_vocab: int = DEFAULT_DRAFT_VOCAB  # a model drafter scores ids below it (+ prompt, EOS); 0: all
    lookup: bool = DEFAULT_LOOKUP  # a model drafter copies from the context when it can ("model+lookup")
    random_weights: bool = False  # both models from their configs with random weights, no tokenizers (load_model)


_DTYPE_FIELDS = (vars(PairConfig)["dtype"], vars(PairConfig)["draft_dtype"])
KERNELS_TASK = "checking specbench's CPU kernels (built once)"


def resolve_dtypes(config: PairConfig, progress: Progress = no_progress) -> tuple[str, str]:
    """(target dtype, drafter dtype) of a config, resolved under a progress line where that
    builds specbench's kernels (a CPU's "auto" read the first time)."""
    dtype, draft = (field.given(config) for field in _DTYPE_FIELDS)
    if not needs_kernels(dtype, draft, config.device) or all(f.is_resolved(config) for f in _DTYPE_FIELDS):
        return config.dtype, config.draft_dtype
    progress(KERNELS_TASK, 0, None)
    resolved = config.dtype, config.draft_dtype
    progress(KERNELS_TASK, 1, 1)
    return resolved


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

    @property
    def drafter_kind(self) -> str:
        """The name make_drafter builds this pair's drafter by: model+lookup for the model
        drafter with lookup on, else drafter_name."""
        return "model+lookup" if self.lookup and self.drafter_name == "model" else self.drafter_name

    def new_drafter(self) -> Drafter | None:
        """A fresh drafter for one generation (None: plain decoding)."""
        if self.drafter_name == NONE:
            return None
        model = self.drafter_model.model if self.drafter_model is not None else None
        with reraise_as(ModelError):
            return make_drafter(
                self.drafter_kind,
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
        if self.drafter_model is not None:
            keep_template_head(self.target, self.drafter_model, self.translated)


def keep_template_head(target: LoadedModel, drafter: LoadedModel, translated: bool) -> None:
    """Let the drafter keep its cache over the opening of the target's chat template between
    generations (drafters.model.keep_head); a translated drafter reads other ids and keeps
    none. Called again once the drafter's kernels change: what it kept is read anew."""
    ids = template_head(target.tokenizer) if target.tokenizer is not None and not translated else []
    keep_head(drafter.model, ids)


def validate_pair_config(config: PairConfig) -> None:
    """Cheap checks before anything loads: specs parse, dtypes and device exist."""
    parse_model_spec(config.target)
    target_dtype, draft_dtype = (field.given(config) for field in _DTYPE_FIELDS)
    if target_dtype.lower() != AUTO:  # "auto" resolves to a dtype that parses (dtypes.py)
        parse_target_dtype(target_dtype, config.device)
    check_device(config.device)
    if draft_dtype.lower() != AUTO:
        parse_draft_dtype(draft_dtype, config.device)
    check_draft_vocab(config.draft_vocab)
    if uses_model(config.drafter.strip()):
        raise ModelError(
            f"--drafter {config.drafter.strip()}: give the drafter model instead "
            "(default, a folder, a .gguf file or a hub id); "
            "--lookup/--no-lookup says whether it copies from the context"
        )
    if drafter_kind(config.drafter) == "model":
        parse_model_spec(config.drafter)


def load_pair(config: PairConfig, progress: Progress = no_progress) -> LoadedPair:
    """Load the target and, if the drafter is a model, the drafter; pair them (translates).
    An early-exit drafter is checked against the target now (ModelError)."""
    validate_pair_config(config)
    resolve_dtypes(config, progress)
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
    config: PairConfig, target: LoadedModel, specs: list[str], kernels: str, progress: Progress = no_progress
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
    config: PairConfig, target: LoadedModel, spec: str, progress: Progress = no_progress
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
    if twins_pay(drafter.model):
        add_twins(drafter.model)
    translated = translates(target, drafter)
    keep_template_head(target, drafter, translated)
    if config.draft_vocab and not translated:
        with reraise_as(ModelError):
            output_head(drafter.model)  # the restricted head needs a plain one
    return drafter, translated
