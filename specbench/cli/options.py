"""Every command-line option, defined once: its flag, its help and its meaning.

A command takes an option by annotating a parameter with one of these types, and gives the
default in its signature (Typer reads defaults there). An option that two commands share is
one type here, so it says the same thing in `generate --help`, `sweep --help` and `costs --help`.
Where `sweep` takes a list (repeat the option to compare several) and `generate` one value,
both types are built from one description of what the values mean (`_each` adds what
repeating does). Typer reads defaults from the signatures, not from an Annotated type, so the
default of an option that several commands take is a constant here, used by each of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specbench.models import options as model_options

TARGET = "default"
DEVICE = "cpu"
KERNELS = "auto"
DTYPE = model_options.DEFAULT_DTYPE
DRAFT_DTYPE = model_options.DEFAULT_DRAFT_DTYPE
DRAFT_VOCAB = model_options.DEFAULT_DRAFT_VOCAB
LOOKUP = model_options.DEFAULT_LOOKUP
TEMPERATURE = 0.0
TOP_K = 0
TOP_P = 1.0
MAX_NEW_TOKENS = 128
SEED = 0
TIMING_REPEATS = 5


def _each(flag: str, help: str, default: str) -> typer.models.OptionInfo:
    """The same option for a sweep: repeat it to compare several values."""
    return typer.Option(flag, help=f"{help} Repeat to compare several; default: {default}.", show_default=False)


# ---------------------------------------------------------------------------- the models

Target = Annotated[
    str, typer.Option("--target", help="Target model: default, a local folder, a .gguf file or a cached hub id.")
]
_DRAFTER = (
    "What drafts: ngram or prompt-lookup (model-free), early-exit:N (the target's first N layers), or a drafter"
    " model (any tokenizer: another one drafts through text)"
)
Drafter = Annotated[
    str, typer.Option("--drafter", help=f"{_DRAFTER}, given as default, a model spec, or none (plain decoding).")
]
Drafters = Annotated[
    list[str] | None,
    _each(
        "--drafter",
        f"{_DRAFTER}, given as model (the --drafter-model), or model+lookup (it, copying from the context when it"
        " can).",
        "model",
    ),
]
_DRAFTER_MODEL = "Drafter model: a model spec (any tokenizer), or none"
DrafterModel = Annotated[
    str, typer.Option("--drafter-model", help=f"{_DRAFTER_MODEL} to measure the target's v(k) alone.")
]
DrafterModels = Annotated[
    list[str] | None,
    _each(
        "--drafter-model",
        f"{_DRAFTER_MODEL}; the model drafter's and hf-assisted's (labels model@NAME when several).",
        "default",
    ),
]
Dtype = Annotated[
    str,
    typer.Option(
        "--dtype",
        help="Target weights: auto (on a CPU with AVX2: q4k for a GGUF target with Q4_K layers, the default one"
        " included, else int8; float32 elsewhere), float32, bfloat16, float16, int8 (weight-only, batch-invariant,"
        " CPU) or q4k (a GGUF file's own Q4_K blocks, the rest int8; batch-invariant, CPU).",
    ),
]
DraftDtype = Annotated[
    str,
    typer.Option(
        "--draft-dtype",
        help="Drafter weights: auto (int8 on the CPU, else bfloat16), float32, bfloat16, float16, int8 (weight-only,"
        " CPU) or q4k (a GGUF drafter's own Q4_K blocks, the rest int8; CPU).",
    ),
]
DraftVocab = Annotated[
    int,
    typer.Option(
        "--draft-vocab",
        help="specbench's model drafter scores only ids below this (plus the prompt's and EOS); 0 scores all."
        " Lossless either way; hf-assisted's drafter scores all.",
    ),
]
Lookup = Annotated[
    bool,
    typer.Option(
        "--lookup/--no-lookup",
        help="With a model drafter: copy from the context instead when its last 3 tokens occurred before (free"
        " drafts).",
    ),
]
Device = Annotated[str, typer.Option("--device", help="cpu, cuda, mps, or auto (accelerate spreads the target).")]
Kernels = Annotated[
    str,
    typer.Option(
        "--kernels",
        help="auto (onednn when available), onednn (faster multi-token CPU forwards of float layers), or default"
        " (PyTorch's); a sweep runs every method on the same kernels.",
    ),
]
RandomWeights = Annotated[
    bool,
    typer.Option(
        "--random-weights",
        help="Build both models from their configs with random weights (no weights read; a folder holding only"
        " config.json will do): the costs of shapes you have not downloaded.",
    ),
]

# ---------------------------------------------------------------------------- drafting and sampling

_GAMMA = "Draft tokens per round"
Gamma = Annotated[
    int | None,
    typer.Option(
        "--gamma",
        help=f"{_GAMMA}: the fixed policy's, the adaptive policies' largest (default: 12 for cost, 4 for the others).",
        show_default=False,
    ),
]
Gammas = Annotated[
    str, typer.Option("--gamma", help=f"{_GAMMA}, one point of the sweep each: 4, a range 1..8, or a list 1,2,4.")
]
_GAMMA_POLICY = "How gamma is chosen each round: cost (measured costs and confidence), fixed, heuristic, egag, ..."
GammaPolicy = Annotated[str, typer.Option("--gamma-policy", help=_GAMMA_POLICY)]
GammaPolicies = Annotated[list[str] | None, _each("--gamma-policy", _GAMMA_POLICY, "fixed")]
GammaMin = Annotated[int, typer.Option("--gamma-min", help="egag: the smallest gamma; heuristic: its floor.")]
GammaMax = Annotated[
    int | None,
    typer.Option(
        "--gamma-max",
        help="Adaptive policies' largest gamma (default: --gamma; the heuristic, like HF's, has none unless given).",
        show_default=False,
    ),
]
EgagBeta = Annotated[float, typer.Option("--egag-beta", help="egag: EMA weight of the previous confidence, in [0, 1).")]
Threshold = Annotated[
    float | None,
    typer.Option(
        "--threshold",
        help="entropy-stop: max normalized entropy; confidence-stop: min top probability.",
        show_default=False,
    ),
]
Temperature = Annotated[
    float,
    typer.Option(
        "--temperature",
        help="0 is greedy (a sweep checks outputs against plain decoding); above 0 samples (losslessly).",
    ),
]
TopK = Annotated[int, typer.Option("--top-k", help="Sample from the k most likely tokens; 0 keeps all.")]
TopP = Annotated[float, typer.Option("--top-p", help="Sample from the smallest set with this much mass, in (0, 1].")]
MaxNewTokens = Annotated[int, typer.Option("--max-new-tokens", help="Most tokens to generate.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the sampling generator (a sweep's repeat r uses seed + r).")]

# ---------------------------------------------------------------------------- generate

Prompt = Annotated[
    str, typer.Argument(help="The prompt (a user turn of the chat template unless --raw).", show_default=False)
]
Raw = Annotated[bool, typer.Option("--raw", help="Feed the prompt as is, without the chat template.")]
AsJson = Annotated[
    bool, typer.Option("--json", help="Print one JSON object (text, token_ids, stats) instead of streaming.")
]
Trace = Annotated[
    bool, typer.Option("--trace", help="Show every round: drafts, q, p, accept/reject, the emitted token.")
]
TraceOut = Annotated[
    Path | None,
    typer.Option("--trace-out", help="Save the rounds as JSONL for `specbench trace FILE`.", show_default=False),
]
CalibrationFile = Annotated[
    str | None,
    typer.Option(
        "--calibration",
        help="Where the cost policy keeps what it learns between runs: a file, or none to start cold and keep"
        " nothing. Default: the cache folder's, one per model pair and settings.",
        show_default=False,
    ),
]
TraceFile = Annotated[
    Path, typer.Argument(help="A trace file written by `specbench generate --trace-out`.", show_default=False)
]

# ---------------------------------------------------------------------------- timing costs

TimingRepeats = Annotated[
    int, typer.Option("--timing-repeats", help="Timed forwards per point of c, v(k) and u(n) (the median counts).")
]
MinTime = Annotated[
    float,
    typer.Option(
        "--min-time",
        help="Time each measured run again, a prompt's runs in turns, until its decodes add up to this many"
        " seconds (at most 9 timings; the median counts): short answers, whose one timing is noisy. 0: once.",
    ),
]
CostsPerPrompt = Annotated[
    bool,
    typer.Option(
        "--costs-per-prompt/--costs-once",
        help="Measure c and v(k) before each prompt's runs, on its context (seconds each), or once at the start.",
    ),
]
ContextTokens = Annotated[
    int,
    typer.Option(
        "--context-tokens",
        help="Tokens in the cache the forwards are timed over (a sweep times each prompt's: prompt plus half the"
        " new tokens).",
    ),
]
CostsOut = Annotated[
    Path,
    typer.Option("--out", help="The costs file to write (JSON), for `specbench predict --costs`.", show_default=False),
]
CostsIn = Annotated[
    Path | None,
    typer.Option(
        "--costs",
        help="A costs file (`specbench costs --out`) or another sweep's meta.json; default: the sweep's own costs.",
        show_default=False,
    ),
]

# ---------------------------------------------------------------------------- sweep

Prompts = Annotated[
    str,
    typer.Option(
        "--prompts",
        help="Prompt set: a name (default, quick) or a file: .jsonl (ours, Spec-Bench's, chat messages,"
        ' {"prompt": ...}), a .json array of those, or .txt (a prompt a line).',
    ),
]
Categories = Annotated[
    list[str] | None,
    typer.Option("--category", help="Only prompts of this category (repeat for several).", show_default=False),
]
Repeats = Annotated[int, typer.Option("--repeats", help="Runs of every combination per prompt.")]
SweepOut = Annotated[
    Path | None,
    typer.Option("--out", help="Results directory (default: results/sweep-DATE-TIME).", show_default=False),
]
Resume = Annotated[
    bool, typer.Option("--resume", help="Continue an interrupted sweep in --out, skipping the rows it has.")
]
HfAssisted = Annotated[
    bool,
    typer.Option(
        "--hf-assisted/--no-hf-assisted",
        help="Also run transformers' counterpart of each drafter: hf-assisted (hf-universal for another"
        " tokenizer), hf-early-exit, hf-prompt-lookup.",
    ),
]
HfFixed = Annotated[
    bool,
    typer.Option(
        "--hf-fixed/--no-hf-fixed", help="Also time hf-assisted at each measured gamma, not only with its own defaults."
    ),
]
HfStock = Annotated[
    bool,
    typer.Option(
        "--hf-stock/--no-hf-stock",
        help="Run hf-assisted's defaults once more on PyTorch's stock Linear kernels, as HF runs without specbench.",
    ),
]
Measure = Annotated[
    str,
    typer.Option(
        "--measure",
        help="Which gammas get timed runs (every one is predicted): best (each drafter/policy's best predicted"
        " gamma), all, or a list such as 2,5.",
    ),
]
MeasurePerCategory = Annotated[
    int,
    typer.Option(
        "--measure-per-category",
        help="Time runs on the first N prompts of each category only (every prompt is predicted); 0: all prompts.",
    ),
]
Shard = Annotated[
    str | None,
    typer.Option(
        "--shard",
        metavar="I/N",
        help="Run only shard I of N: the prompts at positions I-1, I-1+N, ... of the selection (for a"
        " scheduler's job array; join the shards with `specbench merge`). Needs --measure all or a list.",
    ),
]
Steps = Annotated[bool, typer.Option("--steps", help="Also write every speculative round to steps.jsonl.")]

# ---------------------------------------------------------------------------- results directories

ResultsDirectory = Annotated[
    Path, typer.Argument(help="A results directory written by `specbench sweep`.", show_default=False)
]
MergeOut = Annotated[
    Path, typer.Argument(help="The merged results directory to write (a new one).", show_default=False)
]
Shards = Annotated[
    list[Path],
    typer.Argument(help="The shards' results directories (`sweep --shard I/N --out DIR`).", show_default=False),
]
PredictOut = Annotated[
    Path,
    typer.Option("--out", help="The results directory to write (charts: specbench plot DIR).", show_default=False),
]
PlotOut = Annotated[
    Path | None,
    typer.Option("--out", help="Where to write the PNGs (default: the results directory).", show_default=False),
]
