"""Faster CPU matrix kernels for the Linear layers of a model (`--kernels`, default auto).

Why: on AVX2 CPUs PyTorch's default fp32 GEMM (MKL) is slow for a few rows: verifying a
handful of tokens on an fp32 target costs several single steps, which eats most of what
speculation saves. oneDNN's prepacked linear (`torch.ops.mkldnn._linear_pointwise`, the
kernel torch.compile uses on CPU) is much cheaper for 2..16 rows, and cheaper than MKL's
GEMV for one row too. So an fp32 Linear runs every row through its packed weight. Results
agree with the dense kernel to float32 rounding (tested), and plain decoding uses the very
same model objects, so the baseline gets the same kernels.

Half-precision layers are worse off: without AVX-512 bf16 PyTorch's half GEMM costs about
one GEMV per row (a prompt takes several times its fp32 oneDNN time), and oneDNN refuses
bf16 weights. So a half-precision Linear keeps its half weight for one row (a GEMV reads
half the bytes of fp32, which is what makes a bf16 drafter step fast) and for two: a model
drafter feeds two tokens after every fully accepted round (its last draft and the bonus
token), and two half rows still beat the packed copy, while three gained nothing. More rows
run through the packed fp32 copy: the input is widened to fp32 and the output rounded back.
Packed results agree with the half kernel to half rounding, not bit for bit; that is
harmless for a drafter, whose q is whatever it computed.

Which drafter takes which path: on a CPU the default drafter is q4k where specbench's
Q4_K kernel runs, else int8 weight-only where PyTorch has the kernel (gguf_blocks.py,
quantize.py; models/loading.py's resolve_draft_dtype). Neither is swapped here: their
layers run their own kernels, except the dense bf16 Linear an int8 layer keeps for many rows
(a prompt) where int8_linear.c is not built, which is swapped like any other. A bf16 drafter
(`--draft-dtype bfloat16`, or a PyTorch without the int8 kernel) takes the half-precision
path above.

This module only swaps modules; it knows nothing about decoding.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import torch
import torch.nn.functional as F

KERNELS = ("auto", "default", "onednn")  # auto: onednn where this torch has it, else default
# what runs a step in Python (what a kernel choice swaps, which layers go native): cached cost
# measurements key on it, so it changes whenever that does (and on native.sources_digest(),
# which follows the C kernels by itself)
VERSION = 11
SWAPPED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


_stock = [False]  # set by stock_kernels()


@contextmanager
def stock_kernels():
    """Within the block, swapped layers run PyTorch's own kernel on their dense weight, as
    an unswapped model would: how a tool without these kernels (HF's assisted generation as
    it ships) runs the same model objects."""
    _stock[0] = True
    try:
        yield
    finally:
        _stock[0] = False


def onednn_available() -> bool:
    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class HybridLinear(torch.nn.Module):
    """A Linear that runs through prepacked fp32 oneDNN (the output in the layer's dtype),
    except up to HALF_ROWS rows of a half-precision layer, which run with its own half weight."""

    HALF_ROWS = 2

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight  # [out, in], shared with the original module
        self.bias = linear.bias
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach().float(), None)
            self.packed_bias = None if self.bias is None else self.bias.detach().float()
        self.half_gemv = self.weight.dtype != torch.float32

    def __deepcopy__(self, memo) -> HybridLinear:
        """Copy the dense weights and pack the copy anew (a packed tensor cannot be copied)."""
        linear = torch.nn.Linear(
            self.in_features, self.out_features, bias=self.bias is not None, dtype=self.weight.dtype
        )
        linear.weight = copy.deepcopy(self.weight, memo)
        if self.bias is not None:
            linear.bias = copy.deepcopy(self.bias, memo)
        return HybridLinear(linear)

    def forward(
        self,
        x: torch.Tensor,  # [..., in]
    ) -> torch.Tensor:
        if _stock[0] or (self.half_gemv and x.numel() <= self.HALF_ROWS * self.in_features):  # few half rows
            return F.linear(x, self.weight, self.bias)
        out = torch.ops.mkldnn._linear_pointwise(x.float(), self.packed, self.packed_bias, "none", [], "")
        return out.to(x.dtype)


def use_kernels(model: torch.nn.Module, kernels: str) -> int:
    """Swap the model's float CPU Linear layers for the named kernels; returns how many.

    The packed fp32 copy adds 4 bytes per weight (an fp32 1.5B target: about 7 GB more, a
    bf16 0.5B drafter about 2 GB); `--kernels default` keeps PyTorch's kernels and memory.
    """
    if kernels == "auto":
        kernels = "onednn" if onednn_available() else "default"
    if kernels == "default":
        return 0
    if kernels != "onednn":
        raise ValueError(f"unknown kernels {kernels!r}; choose from {', '.join(KERNELS)}")
    if not onednn_available():
        raise ValueError("this PyTorch build has no oneDNN (mkldnn) support")
    return swap_linears(model, SWAPPED_DTYPES, HybridLinear)


def swap_linears(model: torch.nn.Module, dtypes: tuple[torch.dtype, ...], make) -> int:
    """Replace every plain CPU nn.Linear whose weight has one of `dtypes` by make(linear);
    returns how many. (Subclasses and already swapped layers are left alone.)"""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear and child.weight.device.type == "cpu" and child.weight.dtype in dtypes:
                setattr(parent, name, make(child))
                swapped += 1
    return swapped
