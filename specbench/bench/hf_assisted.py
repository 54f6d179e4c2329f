"""transformers' assisted generation, timed and counted like specbench's own runs.

`target.generate(...)` on the same model objects the sweep gives specbench, with a constant
schedule of gamma draft tokens a round, or with HF's own defaults (HF_DEFAULTS, pinned here),
drafting with one of HF's candidate generators (HFDrafter):
  assistant      assistant_model=drafter_model (AssistedCandidateGenerator);
  universal      the same with tokenizer= and assistant_tokenizer=, for a drafter with
                 another tokenizer (Universal Assisted Generation: text between the two;
                 when sampling, HF swaps two of the drafter's modules, see _hf_modules_inside);
  early-exit     assistant_early_exit=N, the target's first N layers (EarlyExitCandidateGenerator);
  prompt-lookup  prompt_lookup_num_tokens=gamma (PromptLookupCandidateGenerator; its own
                 default, 10, for HF's defaults).
HF's drafter scores its whole vocabulary. Rounds are seen through a streamer and forward
hooks; nothing inside transformers is patched, and the models leave every run as they came.
hf_sampling_defect says where HF's universal sampling mode is not lossless (no baseline
there). This module knows nothing of the sweep: it returns an AssistedRun, which the sweep
records like its own runs.
"""

from __future__ import annotations

import contextlib
import copy
import time
import weakref
from dataclasses import dataclass, replace

import torch

from specbench.core.generate import GenerationConfig, context_limit, model_device, sync
from specbench.core.stats import RunStats
from specbench.speed.quantize import Int8Linear, dense_twin

# transformers' own defaults (GenerationConfig._get_default_generation_params in 5.x), pinned
# here so that a drafter's generation_config.json cannot change what "HF's defaults" means
HF_DEFAULTS = {
    "num_assistant_tokens": 20,
    "num_assistant_tokens_schedule": "constant",
    "assistant_confidence_threshold": 0.4,
}
PROMPT_LOOKUP_DEFAULT = 10  # PromptLookupCandidateGenerator's num_output_tokens default


@dataclass(frozen=True)
class HFDrafter:
    """Which of HF's candidate generators drafts (see the module docstring)."""

    kind: str = "assistant"  # "assistant", "universal", "early-exit" or "prompt-lookup"
    tokenizers: tuple | None = None  # universal: (target tokenizer, assistant tokenizer)
    layers: int | None = None  # early-exit: N

    def generate_kwargs(self, drafter_model, gamma: int | None) -> dict:
        """What generate() is given besides the inputs and the generation config."""
        if self.kind == "prompt-lookup":
            return {"prompt_lookup_num_tokens": gamma or PROMPT_LOOKUP_DEFAULT}
        if self.kind == "early-exit":
            return {"assistant_early_exit": self.layers}
        kwargs = {"assistant_model": drafter_model}
        if self.kind == "universal":
            kwargs.update(tokenizer=self.tokenizers[0], assistant_tokenizer=self.tokenizers[1])
        return kwargs

    def schedule_owner(self, target, drafter_model):
        """The model whose generation_config HF reads the draft schedule from (None: none)."""
        return {"prompt-lookup": None, "early-exit": target}.get(self.kind, drafter_model)


@dataclass
class AssistedRun:
    token_ids: list[int]  # the new tokens
    stats: RunStats
    acceptance_known: bool  # False when the forward counts do not match the rounds seen
    stop_reason: str | None  # "eos", "max_new_tokens", or None (neither)


class _RoundClock:
    """A generate() streamer that notes when each batch of tokens arrives. generate() first
    puts the prompt, then assisted decoding puts each round's accepted tokens plus one."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.sizes: list[int] = []

    def put(self, value) -> None:
        self.times.append(time.perf_counter())
        self.sizes.append(int(value.numel()))

    def end(self) -> None:
        pass


class _ForwardCounter:
    """Counts a module's forward calls while in a `with` block."""

    def __init__(self, module) -> None:
        self.module, self.calls = module, 0  # module None: counts nothing

    def __enter__(self) -> _ForwardCounter:
        self.handle = self.module.register_forward_hook(self._count) if self.module is not None else None
        return self

    def _count(self, *_) -> None:
        self.calls += 1

    def __exit__(self, *_) -> None:
        if self.handle is not None:
            self.handle.remove()


def _hf_generation_config(gen: GenerationConfig):
    """transformers' GenerationConfig matching ours: same sampling, same stops, no extras
    (explicit values win over whatever the checkpoint's generation_config.json says)."""
    from transformers import GenerationConfig as HFGenerationConfig

    sampling = gen.sampling
    options = dict(
        max_new_tokens=gen.max_new_tokens,
        eos_token_id=list(gen.eos_token_ids),
        pad_token_id=gen.eos_token_ids[0] if gen.eos_token_ids else 0,
        repetition_penalty=1.0,
        do_sample=not sampling.greedy,
    )
    if not sampling.greedy:
        options.update(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
    return HFGenerationConfig(**options)


def _assistant_settings(drafter_model, gamma: int | None):
    """A copy of the drafter's generation_config asking HF for exactly gamma drafts a round
    (constant schedule, no confidence threshold to stop a draft early), or, for gamma None,
    HF's defaults. A copy, because HF adjusts the threshold in place as it goes."""
    settings = copy.deepcopy(drafter_model.generation_config)
    chosen = (
        HF_DEFAULTS
        if gamma is None
        else {
            "num_assistant_tokens": gamma,
            "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0,
        }
    )
    for name, value in chosen.items():
        setattr(settings, name, value)
    return settings


# HF's translator (AssistantToTargetTranslator) -> the drafter's (output head, input
# embeddings) as HF left them when it built that translator
_HF_MODULES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def _hf_modules_inside(drafter_model, tokenizers: tuple):
    """The drafter's own output head and input embeddings outside HF's universal sampling
    runs, HF's inside them.

    When sampling with two tokenizers, HF (UniversalSpeculativeDecodingGenerator) builds one
    translator per tokenizer pair and caches it (AssistantVocabTranslatorCache); building it
    replaces, in place and for good, the drafter's output head by one pruned to the tokens
    both vocabularies share and its input embeddings by a wrapper that maps ids into that
    pruned space. specbench drafts with the same model object, so: after a run the modules HF
    put in are kept (beside its translator) and the model's own go back; before a run whose
    translator HF has cached, HF's go back in, since HF will not build them again. A cached
    translator whose modules were not kept here is dropped, so HF builds it afresh, from a
    head it can prune (_prunable)."""
    from transformers.generation.candidate_generator import AssistantVocabTranslatorCache

    own = drafter_model.get_output_embeddings(), drafter_model.get_input_embeddings()
    pairs = AssistantVocabTranslatorCache._cache
    translator = pairs.get(tokenizers[0], {}).get(tokenizers[1])
    if translator in _HF_MODULES:
        _set_modules(drafter_model, _HF_MODULES[translator])
    else:
        if translator is not None:
            del pairs[tokenizers[0]][tokenizers[1]]
        _set_modules(drafter_model, (_prunable(own[0]), own[1]))
    try:
        yield
    finally:
        translator = pairs.get(tokenizers[0], {}).get(tokenizers[1])
        left = drafter_model.get_output_embeddings(), drafter_model.get_input_embeddings()
        if translator is not None and any(a is not b for a, b in zip(left, own)):
            _HF_MODULES[translator] = left
        _set_modules(drafter_model, own)


def _prunable(head):
    """The head as HF's pruning needs it, a module with a weight: an int8 head
    (quantize.Int8Linear) as its dense twin over the same rows, any other as it is."""
    return dense_twin(head.qweight, head.scales, head.bias) if isinstance(head, Int8Linear) else head


def _set_modules(model, modules: tuple) -> None:
    """Put (output head, input embeddings) into the model."""
    model.set_output_embeddings(modules[0])
    model.set_input_embeddings(modules[1])


class _RowIdAssistant(torch.nn.Module):
    """A stand-in drafter for hf_sampling_defect: its head's row i scores i (input 1)."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.head = torch.nn.Linear(1, vocab, bias=False)
        self.embed = torch.nn.Embedding(vocab, 1)
        with torch.no_grad():
            self.head.weight.copy_(torch.arange(vocab, dtype=torch.float32)[:, None])
        self.device = torch.device("cpu")

    def get_output_embeddings(self):
        return self.head

    def set_output_embeddings(self, module) -> None:
        self.head = module

    def get_input_embeddings(self):
        return self.embed

    def set_input_embeddings(self, module) -> None:
        self.embed = module


@torch.inference_mode()
def hf_sampling_defect(target_tokenizer, drafter_tokenizer, target_vocab_size: int) -> str | None:
    """What keeps HF's universal sampling mode from being lossless on a tokenizer pair, or
    None: it drafts each token with the probability the drafter gave it.

    That mode builds a translator for the pair (AssistantToTargetTranslator, pruning the
    drafter's head as in _hf_modules_inside), maps each drafted row of the head to a target
    id (get_target_ids) and its scores onto the target's vocabulary (get_target_logits), then
    accepts a draft with probability min(1, p/q). This builds one as HF would, over a
    stand-in drafter whose head row scores the drafter id it holds, and checks that every
    row's target id gets that row's score. transformers 5.24 fails it for real tokenizers
    (the pruned head's rows come in vocabulary-dict order and are read back in id order, so q
    is another token's) and cannot run at all when the drafter's vocabulary is inside the
    target's (it prunes nothing, then looks for the pruned rows)."""
    from transformers.generation.candidate_generator import AssistantToTargetTranslator

    vocab = max(drafter_tokenizer.get_vocab().values()) + 1
    stand_in = _RowIdAssistant(vocab)
    translator = AssistantToTargetTranslator(
        target_tokenizer, drafter_tokenizer, target_vocab_size, stand_in, assistant_prune_lm_head=True
    )
    scores = stand_in.get_output_embeddings()(torch.ones(1, 1))  # [1, rows]
    rows = torch.arange(scores.shape[1])[None]
    nothing = torch.zeros(1, 0, dtype=torch.long)
    try:
        target_ids = translator.get_target_ids(nothing, nothing, rows)[0]
        target_scores = translator.get_target_logits(scores)[0]
    except (AttributeError, IndexError, RuntimeError) as exc:
        return f"fails on this pair ({type(exc).__name__}: {exc})"
    drafted = target_ids >= 0  # rows of tokens the target's vocabulary lacks are never drafted
    if not torch.equal(target_scores[target_ids[drafted]], scores[0, drafted]):
        return "scores its drafts under other tokens' probabilities for this pair"
    return None


@torch.inference_mode()
def measure_hf_assisted(
    target,
    drafter_model,
    prompt_ids: list[int],
    gen: GenerationConfig,
    gamma: int | None,
    drafter: HFDrafter = HFDrafter(),
) -> AssistedRun:
    """HF's assisted generation, timed and counted like specbench's own runs.

    Timing: HF has no separate first-target pass (its first round drafts from the prompt and
    the target prefills prompt + drafts in one forward), so its first round plays that part.
    A streamer notes when each round's tokens arrive; tokens_per_second = tokens after the
    first round / wall seconds from the end of the first round to the return of generate(),
    and prefill_seconds is the time to the end of the first round (setup included).

    Counting: forward hooks count target forwards (one per round) and drafter forwards (one per
    draft token). drafted = drafter forwards; accepted = new tokens - rounds (each round emits
    its accepted drafts plus one token). When the target forwards do not match the rounds seen,
    the count is not trusted and acceptance is reported as unknown. Early exit drafts with the
    target's own forward: its forwards beyond one per round are the drafts. Prompt lookup runs
    no drafter forward, so what it drafted is not seen: acceptance unknown.
    """
    from transformers.utils import logging as hf_logging

    room = context_limit(target) - len(
        prompt_ids
    )  # specbench's loops stop where the context ends; HF would run past it
    capped = replace(gen, max_new_tokens=min(gen.max_new_tokens, room))
    device = model_device(target)
    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    clock = _RoundClock()
    owner = drafter.schedule_owner(target, drafter_model)
    saved_settings, saved_verbosity = (
        (owner.generation_config if owner is not None else None),
        hf_logging.get_verbosity(),
    )
    if owner is not None:
        owner.generation_config = _assistant_settings(owner, gamma)
    hf_logging.set_verbosity_error()  # HF warns about flags it ignores; the progress bar needs stderr
    counted = drafter_model if drafter.kind in ("assistant", "universal") else None
    sampling_universal = drafter.kind == "universal" and not gen.sampling.greedy
    swapped = _hf_modules_inside(drafter_model, drafter.tokenizers) if sampling_universal else contextlib.nullcontext()
    try:
        torch.manual_seed(gen.seed)  # HF samples from the global generator
        with swapped, _ForwardCounter(target) as target_calls, _ForwardCounter(counted) as drafter_calls:
            start = time.perf_counter()
            output = target.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                generation_config=_hf_generation_config(capped),
                streamer=clock,
                **drafter.generate_kwargs(drafter_model, gamma),
            )
            sync(device)
            end = time.perf_counter()
    finally:
        if owner is not None:
            owner.generation_config = saved_settings
        hf_logging.set_verbosity(saved_verbosity)
    token_ids = output[0, len(prompt_ids) :].tolist()
    rounds = len(clock.sizes) - 1
    target_forwards, drafted = target_calls.calls, drafter_calls.calls
    if drafter.kind == "early-exit":  # one full forward a round, the rest are drafts
        target_forwards, drafted = rounds, target_calls.calls - rounds
    stats = _hf_stats(token_ids, clock.times[1:], clock.sizes[1:], start, end, target_forwards, drafted)
    known = target_forwards == rounds and drafter.kind != "prompt-lookup"
    return AssistedRun(token_ids, stats, known, _hf_stop_reason(token_ids, gen, room))


def _hf_stop_reason(token_ids: list[int], gen: GenerationConfig, room: int) -> str | None:
    """Why HF stopped, in the Stopper's words and order (None: neither EOS nor a length
    limit); room: the new tokens the context leaves."""
    if token_ids and token_ids[-1] in gen.eos_token_ids:
        return "eos"
    if len(token_ids) >= gen.max_new_tokens:
        return "max_new_tokens"
    return "context" if len(token_ids) >= room else None


def _hf_stats(
    token_ids: list[int],
    times: list[float],
    sizes: list[int],
    start: float,
    end: float,
    target_forwards: int,
    drafter_forwards: int,
) -> RunStats:
    """RunStats of an HF assisted run from its per-round arrival times and sizes."""
    rounds = len(sizes)
    first_end = times[0] if times else end
    return RunStats(
        new_tokens=len(token_ids),
        first_pass_tokens=sizes[0] if sizes else 0,  # HF's first round stands in for the first pass
        drafted=drafter_forwards,
        accepted=max(0, len(token_ids) - rounds),
        rounds=max(0, rounds - 1),
        target_forwards=target_forwards,
        prefill_seconds=first_end - start,
        decode_seconds=end - first_end,
    )
