"""bfloat16 twins of a q4k drafter's layers, for its long forwards (the prompt, a catch-up).

Why: a Q4_K layer (gguf_blocks.py) runs every row through q4k_linear.c, which is
batch-invariant, so it does each row's arithmetic on its own. A model drafter reads the
prompt in its first model round (drafters/model.py), and that forward's time is draft time:
through Q4_K rows it costs about a third of a draft step per id, some 21 draft steps for a
66-id chat prompt, which a short answer never earns back. Where the CPU multiplies bfloat16
natively (AMX, AVX512_BF16), oneDNN's GEMM over a bfloat16 copy of the same weights runs
that forward in a fraction of the time; below gguf_blocks.TWIN_ROWS rows the Q4_K rows are
the faster. Where it does not, oneDNN emulates bfloat16 (many times slower than float32) and
float32 GEMM is no faster than the Q4_K rows, so no twin is made there and nothing changes.

Each twin is packed once into oneDNN's own blocked layout (an mkldnn tensor): handed a plain
weight, oneDNN's AMX GEMM copies it into that layout on every call, about a third of a
prompt read's time; packed, a call gives the same products without the copy.
docs/log.md has the measurements.

Lossless: the drafter's q is whatever it computed, and verification checks every draft. The
twin holds the Q4_K (or Q6_K) weight dequantized and rounded to bfloat16, so a row through
it differs from the same row through the Q4_K kernel in its last bits (the drafter agreed
with the target's greedy path as often either way). Only drafters get twins: a target's
rows must give the same bits alone or among a verify pass's.

What it costs: a bfloat16 copy of every Q4_K/Q6_K layer of the drafter's decoder, built
once at load (about 0.7 GB for Qwen2.5-0.5B's). SPECBENCH_TWINS=0 makes none (to save that
memory, or to see what a CPU without native bfloat16 does).

Knows nothing about decoding; models/loading.py calls add_twins for a CPU drafter.
"""

from __future__ import annotations

import os

import torch

from specbench.speed import native
from specbench.speed.gguf_blocks import Q4KLinear, Q6KLinear

TWINS_ENV = "SPECBENCH_TWINS"  # "0": no twins
NATIVE_BF16 = ("amx_bf16", "amx_tile", "avx512_bf16")  # /proc/cpuinfo flags of a CPU that multiplies bf16 natively
PACK_ROWS = 64  # the rows a twin's packed layout is chosen for: about a chat prompt's read


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (NATIVE_BF16), where oneDNN's bfloat16
    GEMM is fast."""
    return any(flag in native.cpu_flags() for flag in NATIVE_BF16)


def add_twins(model) -> int:
    """Give every Q4_K and Q6_K layer of the model's decoder a bfloat16 twin (the weight it
    stands for); returns how many layers got one."""
    made = packs = 0
    for layer in model.get_decoder().modules():
        if isinstance(layer, (Q4KLinear, Q6KLinear)):
            layer.twin = packed(layer.dense_bf16())
            made += 1
            packs += layer.twin.is_mkldnn
    model.specbench_twins = made > 0
    model.specbench_packed_twins = made > 0 and packs == made
    return made


def packed(weight: torch.Tensor) -> torch.Tensor:
    """weight [out, in] (bfloat16) laid out once for oneDNN's GEMM, as PyTorch's own compiler
    packs a frozen Linear's weight (an mkldnn tensor, run by gguf_blocks.twin_linear); the
    plain tensor where this PyTorch has no oneDNN."""
    if not torch.backends.mkldnn.is_available():
        return weight
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight, PACK_ROWS)
    except (AttributeError, RuntimeError):  # an op this build does not have, or refuses
        return weight


def has_twins(model) -> bool:
    """Whether add_twins gave the model's layers twins (read on every draft step: an attribute)."""
    return getattr(model, "specbench_twins", False)


def twins_label(model) -> str:
    """How the model's twins run, for its cost key: "" (none), "bf16 twins" or
    "packed bf16 twins" (their long forwards cost less)."""
    if not has_twins(model):
        return ""
    return "packed bf16 twins" if getattr(model, "specbench_packed_twins", False) else "bf16 twins"


def twins_pay(model) -> bool:
    """Whether a drafter model on this device should get twins: a CPU that multiplies
    bfloat16 natively, layers of Q4_K or Q6_K blocks, and SPECBENCH_TWINS not "0"."""
    if os.environ.get(TWINS_ENV, "").strip() == "0":
        return False
    on_cpu = next(model.parameters(), torch.empty(0)).device.type == "cpu"
    quantized = any(isinstance(layer, (Q4KLinear, Q6KLinear)) for layer in model.get_decoder().modules())
    return on_cpu and quantized and native_bf16()
