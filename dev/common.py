"""What the maintainer scripts in dev/ share: the default pair on the CPU fast paths, a
prompt's ids, one line saying which machine the numbers come from, and a forward with
fused_step.py's native layers turned off.

Each script runs from the repository root (`python dev/NAME.py --help`) and imports this
module by its plain name: Python puts the script's own folder first on the path.
"""

from __future__ import annotations

import torch

from specbench.bench.prompts import Prompt
from specbench.models.loading import PairConfig, load_pair
from specbench.models.model import quiet_transformers
from specbench.models.text import encode_prompt
from specbench.speed import kv_slab, native


def load_default_pair(draft_dtype: str = "auto", kernels: str = "auto"):
    """The embedded default pair (the target and its model drafter), Linear kernels swapped
    as `specbench generate --kernels` would."""
    quiet_transformers()
    pair = load_pair(PairConfig(draft_dtype=draft_dtype))
    pair.use_kernels(kernels)
    return pair


def prompt_ids(pair, prompt: Prompt | str) -> list[int]:
    """A prompt set's prompt (all its turns) or a string, as the sweep encodes it."""
    return encode_prompt(pair.tokenizer, prompt if isinstance(prompt, str) else prompt.messages())


def machine_line() -> str:
    """Where the numbers come from: the CPU and the instruction sets that pick fast paths."""
    cpu = native.cpu_description()
    flags = ", ".join(cpu["flags"]) or "none of " + ", ".join(native.SPEED_FLAGS)
    built = "" if cpu["kernels_march"] == "native" else f", kernels built for -march={cpu['kernels_march']}"
    return (
        f"{cpu['model']} [{flags}]{built}, {torch.get_num_threads()} torch threads, torch {torch.__version__}; "
        f"int8 draft kernel: {native.name()}"
    )


def unfused(decoder, forward):
    """forward() with a LeanDecoder's layers through the lean forward's PyTorch operations,
    not fused_step.py's native calls."""
    fused, decoder.fused = decoder.fused, None
    try:
        return forward()
    finally:
        decoder.fused = fused


def layer_at_a_time(forward):
    """forward() with native layers called a layer at a time, each layer's rows appended through
    the cache's own update (kv_slab.py off), as before all of them ran in one call."""
    slabs, kv_slab.slabs = kv_slab.slabs, lambda *args: None
    try:
        return forward()
    finally:
        kv_slab.slabs = slabs
