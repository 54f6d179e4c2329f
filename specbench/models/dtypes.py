"""Dtype names and what "auto" stands for: the weights format each model of a pair runs in.

A dtype name is a torch float type (float32, bfloat16, float16 and their short names) or a
CPU run format (int8, q4k: built one tensor at a time by build.py, computed by specbench's
batch-invariant kernels). "auto" picks per device: on a CPU the fastest format whose kernels
run here, on a CUDA device bfloat16 for both models.

The choice is split in two so that it stays cheap to ask about: `auto_target_dtype` and
`auto_draft_dtype` are pure (the facts about this machine come in as arguments), and
`resolve_target_dtype` / `resolve_draft_dtype` gather those facts, which on a CPU means
building specbench's kernels (speed/native.py) the first time. Nothing here runs at import;
loading.PairConfig resolves "auto" when a dtype is first read, not when it is constructed.

Why these defaults: a CPU decode step is bound by reading weights (Q4_K reads 4.5 bits a
weight, int8 8, float32 32), and the batch-invariant kernels give a k-token verify pass the
bits of k one-token steps, so greedy output matches plain decoding. A bfloat16 target is not
the CPU default: PyTorch's k-token and one-token passes round it differently, so greedy output
can drift from plain decoding, and it verifies slowly on a CPU. The drafter only proposes, so
it may round: q4k where specbench's Q4_K kernel runs (its head int8), else PyTorch's int8
weight-only kernel, else bfloat16. On a GPU the dense bfloat16 kernels are the fast path.
"""

from __future__ import annotations

import torch

from specbench.errors import ModelError, OptionError
from specbench.models import defaults
from specbench.models.specs import DEFAULT, parse_model_spec
from specbench.speed.gguf_blocks import Q4K, q4k_why_not
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
RUN_FORMATS = (INT8, Q4K)  # CPU formats built one tensor at a time (build.py)


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name.lower()]
    except KeyError:
        raise ModelError(f"unknown dtype {name!r}; choose from auto, float32, bfloat16, float16, int8, q4k") from None


def is_cuda(device: str) -> bool:
    """Whether a device name is a CUDA device ("cuda", "cuda:1")."""
    return device.split(":")[0] == "cuda"


def auto_target_dtype(device: str, int8_kernel: bool, q4k_kernel: bool, q4k_layers: bool) -> str:
    """What "auto" stands for as a target's dtype: bfloat16 on a CUDA device; on a CPU where
    specbench's int8 kernel runs, q4k for a target with Q4_K layers where the Q4_K kernel
    runs too, else int8; float32 anywhere else."""
    if is_cuda(device):
        return "bfloat16"
    if device != "cpu" or not int8_kernel:
        return "float32"
    return Q4K if q4k_kernel and q4k_layers else INT8


def auto_draft_dtype(device: str, torch_int8: bool, q4k_kernel: bool) -> str:
    """What "auto" stands for as a drafter's dtype: on a CPU, q4k where specbench's Q4_K
    kernel runs, else int8 where PyTorch has its int8 weight-only kernel (torch_int8; both
    need it, for the head); bfloat16 otherwise (a GPU, device "auto")."""
    if device != "cpu" or not torch_int8:
        return "bfloat16"
    return Q4K if q4k_kernel else INT8


def resolve_target_dtype(name: str, device: str, target: str = DEFAULT) -> str:
    """The target dtype a name stands for (auto_target_dtype; other names unchanged). On a
    CPU this builds specbench's kernels the first time it is asked."""
    if name.lower() != AUTO:
        return name
    int8_kernel = device == "cpu" and target_int8_why_not() is None
    q4k_kernel = int8_kernel and q4k_why_not() is None
    return auto_target_dtype(device, int8_kernel, q4k_kernel, q4k_kernel and has_q4k_layers(target))


def resolve_draft_dtype(name: str, device: str) -> str:
    """The drafter dtype a name stands for (auto_draft_dtype; other names unchanged). On a
    CPU this builds specbench's Q4_K kernel the first time it is asked."""
    if name.lower() != AUTO:
        return name
    torch_int8 = device == "cpu" and int8_available()
    return auto_draft_dtype(device, torch_int8, torch_int8 and q4k_why_not() is None)


def needs_kernels(dtype: str, draft_dtype: str, device: str) -> bool:
    """Whether resolving these names would ask specbench's kernels (a CPU's "auto")."""
    return device == "cpu" and AUTO in (dtype.lower(), draft_dtype.lower())


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
    if name.lower() not in RUN_FORMATS:
        return parse_dtype(name)
    if device != "cpu":
        raise ModelError(f"--dtype {name.lower()} runs on the CPU only, not on {device}")
    if (why := target_int8_why_not() or (q4k_why_not() if name.lower() == Q4K else None)) is not None:
        raise ModelError(f"--dtype {name.lower()}: {why}")
    return torch.float32


def parse_draft_dtype(name: str, device: str) -> torch.dtype:
    """The dtype a drafter computes in: bf16 for int8 (weight-only, quantize.py) and for q4k
    (its decoder layers as Q4_K blocks quantized by gguf_blocks.quantize_q4k, its head
    int8 with its first rows as Q4_K blocks too; models/build.py)."""
    if name.lower() not in RUN_FORMATS:
        return parse_dtype(name)
    if device != "cpu":
        raise ModelError(f"--draft-dtype {name.lower()} runs on the CPU only, not on {device}")
    if not int8_available():
        raise ModelError(f"--draft-dtype {name.lower()}: this PyTorch build has no int8 weight-only kernel")
    if name.lower() == Q4K:
        if (why := q4k_why_not()) is not None:
            raise ModelError(f"--draft-dtype q4k: {why}")
    return torch.bfloat16


def parse_role_dtype(role: str, name: str, device: str) -> torch.dtype:
    """The dtype a model of `role` ("target" or "drafter") computes in."""
    return parse_draft_dtype(name, device) if role == "drafter" else parse_target_dtype(name, device)
