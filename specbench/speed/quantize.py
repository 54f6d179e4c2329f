"""Weight-only int8 Linear layers for a drafter (`--draft-dtype int8`, the CPU default where
PyTorch has the kernel).

Why: a single-token forward of a small bf16 drafter is bound by reading its weights, and
int8 weights are half the bytes. Each output row of a weight gets one scale (absmax / 127);
activations stay bf16, so the drafter loses little: quantizing the activations as well
(PyTorch's dynamic int8) cut the drafter's greedy agreement with the target markedly. Up to
MAX_INT8_ROWS rows (a draft step, a round's catch-up) run `torch._weight_int8pack_mm`, the
int8 kernel PyTorch ships for CPUs; more rows (a prompt) run an ordinary bf16 Linear over
the dequantized weight, which `--kernels` may swap like any other. MAX_INT8_ROWS is where
the two meet: the int8 kernel's time grows with the rows faster than the packed fp32 oneDNN
copy that `--kernels` gives the dense layer, for the MLP weights and the head alike.

Only drafters: a target's one-token and several-token forwards would round differently, and
greedy parity with plain decoding needs them to agree. The drafter's q is whatever it
computed, so verification stays lossless.

Knows nothing about decoding or loading; models/loading.py calls quantize_linears.
"""

from __future__ import annotations

import torch

from specbench.speed import native
from specbench.speed.kernels import swap_linears

INT8 = "int8"  # the dtype name that asks for this
MAX_INT8_ROWS = 4  # more rows than this run the dense layer


def int8_available() -> bool:
    return hasattr(torch, "_weight_int8pack_mm")


class Int8Linear(torch.nn.Module):
    """y = x W^T + b with W stored as int8 rows times one bf16 scale per row."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        qweight, scales = quantize_rows(linear.weight.detach())
        self.register_buffer("qweight", qweight)  # [out, in] int8
        self.register_buffer("scales", scales)  # [out] bf16
        # several rows: a plain bf16 Linear over the dequantized weight (kernels may swap it);
        # its bias serves the one-row path too
        self.dense = torch.nn.Linear(self.in_features, self.out_features, bias=linear.bias is not None, dtype=torch.bfloat16, device=qweight.device)
        with torch.no_grad():
            self.dense.weight.copy_(dequantize_rows(qweight, scales))
            if linear.bias is not None:
                self.dense.bias.copy_(linear.bias)
        self.dense.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not runs_int8(x):
            return self.dense(x)
        return int8_linear(x, self.qweight, self.scales, self.dense.bias)


def runs_int8(x: torch.Tensor) -> bool:
    """Whether activations x [..., in] take the int8 kernel: bf16, at most MAX_INT8_ROWS rows."""
    return x.dtype == torch.bfloat16 and x.numel() // x.shape[-1] <= MAX_INT8_ROWS


def int8_linear(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] (bf16) times int8 rows qweight [out, in] with scales [out], plus bias."""
    out = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), qweight, scales)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], qweight.shape[0])


def fast_int8_linear(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """int8_linear through specbench's own kernel (native.py, int8_gemv.c) where it is built
    and takes the call, else through PyTorch's. Only specbench's draft step calls it (the
    lean forward and the restricted head); a module's forward, which HF's generation runs,
    keeps PyTorch's kernel."""
    lib = native.kernel()
    rows, width = x.numel() // x.shape[-1], x.shape[-1]
    if lib is None or x.device.type != "cpu" or not runs_int8(x) or scales.dtype != torch.bfloat16:
        return int8_linear(x, qweight, scales, bias)
    x2 = x.reshape(rows, width).contiguous()
    qweight, scales = qweight.contiguous(), scales.contiguous()
    if bias is not None:
        bias = bias.to(torch.bfloat16).contiguous()
    out = torch.empty(rows, qweight.shape[0], dtype=torch.bfloat16)
    status = lib.specbench_int8_gemv(x2.data_ptr(), rows, width, qweight.data_ptr(), scales.data_ptr(), None if bias is None else bias.data_ptr(), qweight.shape[0], out.data_ptr())
    if status != 0:
        return int8_linear(x, qweight, scales, bias)
    return out.reshape(*x.shape[:-1], qweight.shape[0])


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per output row: (q [out, in] int8, scale [out] bf16), w ~ q * scale."""
    w = weight.float()
    scales = (w.abs().amax(dim=1) / 127).clamp(min=1e-10).to(torch.bfloat16)
    q = torch.round(w / scales.float()[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


def dequantize_rows(qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return (qweight.float() * scales.float()[:, None]).to(torch.bfloat16)


def quantize_linears(model: torch.nn.Module) -> int:
    """Swap every bf16 CPU nn.Linear of the model for an Int8Linear; returns how many.

    Tied weights (an lm_head sharing the embedding) stay tied to nothing: the embedding keeps
    its bf16 table and the head gets its own int8 copy.
    """
    if not int8_available():
        raise ValueError("this PyTorch build has no int8 weight-only kernel (torch._weight_int8pack_mm)")
    return swap_linears(model, (torch.bfloat16,), Int8Linear)
