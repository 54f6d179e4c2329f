"""Weight-only int8 Linear layers: a drafter's (`--draft-dtype int8`) and a target's (`--dtype int8`).

Why: a single-token forward of a small bf16 drafter is bound by reading its weights, and
int8 weights are half the bytes. Each output row of a weight gets one scale (absmax / 127);
activations stay bf16, so the drafter loses little: quantizing the activations as well
(PyTorch's dynamic int8) cut the drafter's greedy agreement with the target markedly. Up to
MAX_INT8_ROWS rows (a draft step, a round's catch-up) run `torch._weight_int8pack_mm`, the
int8 kernel PyTorch ships for CPUs (specbench's draft step calls fast_int8_linear, which
prefers specbench's kernels); more rows (a prompt) run int8_linear.c, or, where it is not
built, an ordinary bf16 Linear over the dequantized weight, which `--kernels` may swap like
any other: PyTorch's int8 kernel's time grows with the rows faster than either.

A drafter's one-token and several-token forwards may round differently: its q is whatever
it computed, so verification stays lossless. A target's may not: greedy parity with plain
decoding needs the target's k-token verify pass to give each row exactly what a one-token
step gives. So the target's layers (Int8TargetLinear) run only through int8_linear.c, which
sums every dot product exactly in integers (activations quantized to int16 per row, one
float32 scale per weight row) and so gives a row the same bits whatever else shares the
call; there is no PyTorch fallback that could round differently, and without the kernel an
int8 target is refused. Why int8 at all: a CPU target step is bound by reading its weights,
and int8 reads a quarter of float32's bytes.

Knows nothing about decoding or loading; models/loading.py calls quantize_linears and
quantize_target.
"""

from __future__ import annotations

import gc

import torch

from specbench.speed import native
from specbench.speed.gguf_blocks import Q4K_BUFFERS
from specbench.speed.kernels import swap_linears

INT8 = "int8"  # the dtype name that asks for this
MAX_INT8_ROWS = 4  # more rows than this run the dense layer


def int8_available() -> bool:
    return hasattr(torch, "_weight_int8pack_mm")


class Int8Linear(torch.nn.Module):
    """y = x W^T + b with W stored as int8 rows times one bf16 scale per row.

    Up to MAX_INT8_ROWS rows run PyTorch's int8 kernel; more rows (a prompt) run int8_linear.c
    where it is built, else a dense bf16 twin over the dequantized weight (`--kernels` may swap
    it), which only then is kept.
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        qweight, scales = quantize_rows(linear.weight.detach())
        self.register_buffer("qweight", qweight)  # [out, in] int8
        self.register_buffer("scales", scales)  # [out] bf16
        bias = None if linear.bias is None else linear.bias.detach().to(torch.bfloat16).contiguous()
        self.register_buffer("bias", bias)  # [out] bf16 or None
        self.dense = None if native.linear_kernel() is not None else dense_twin(qweight, scales, bias)

    def hold_q4k_rows(self, blocks: dict[str, torch.Tensor]) -> None:
        """Also hold the weight's first rows as Q4_K blocks (gguf_blocks.quantize_q4k's): a
        q4k drafter's head, whose draft step scores those ids through them, 4.5 bits a
        weight against the int8 rows' 8 (draft_vocab.py). The module's own forward, which HF's
        generation runs, keeps the int8 rows."""
        for name in Q4K_BUFFERS:
            self.register_buffer(f"q4k_{name}", blocks[name].contiguous())

    def q4k_rows(self) -> dict[str, torch.Tensor] | None:
        """The Q4_K blocks of the first rows (by Q4K_BUFFERS' names), or None where it holds none."""
        found = {name: self._buffers.get(f"q4k_{name}") for name in Q4K_BUFFERS}
        return None if any(t is None for t in found.values()) else found

    def forward(
        self,
        x: torch.Tensor,  # [..., in]
    ) -> torch.Tensor:
        if runs_int8(x):
            return int8_linear(x, self.qweight, self.scales, self.bias)
        if self.dense is not None:
            return self.dense(x)
        return native_int8_linear(x.to(torch.bfloat16), self.qweight, self.scales, self.bias)


def dense_twin(
    qweight: torch.Tensor,  # [out, in] int8
    scales: torch.Tensor,  # [out]
    bias: torch.Tensor | None,  # [out] or None
) -> torch.nn.Linear:
    """A bf16 Linear over the dequantized rows (skip_init: no random weights to overwrite)."""
    out_features, in_features = qweight.shape
    dense = torch.nn.utils.skip_init(
        torch.nn.Linear, in_features, out_features, bias=bias is not None, dtype=torch.bfloat16, device=qweight.device
    )
    with torch.no_grad():
        dense.weight.copy_(dequantize_rows(qweight, scales))
        if bias is not None:
            dense.bias.copy_(bias)
    return dense.requires_grad_(False)


def runs_int8(
    x: torch.Tensor,  # [..., in]
) -> bool:
    """Whether activations x [..., in] take the int8 kernel: bf16, at most MAX_INT8_ROWS rows."""
    return x.dtype == torch.bfloat16 and x.numel() // x.shape[-1] <= MAX_INT8_ROWS


def int8_linear(
    x: torch.Tensor,  # [..., in]
    qweight: torch.Tensor,  # [out, in] int8
    scales: torch.Tensor,  # [out]
    bias: torch.Tensor | None,  # [out] or None
) -> torch.Tensor:
    """x [..., in] (bf16) times int8 rows qweight [out, in] with scales [out], plus bias."""
    out = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), qweight, scales)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], qweight.shape[0])


def fast_int8_linear(
    x: torch.Tensor,  # [..., in]
    qweight: torch.Tensor,  # [out, in] int8
    scales: torch.Tensor,  # [out]
    bias: torch.Tensor | None,  # [out] or None
) -> torch.Tensor:
    """int8_linear through specbench's own kernels where one is built and takes the call
    (native.py: int8_gemv.c on AVX512-VNNI, else int8_linear.c on AVX2), else through
    PyTorch's. Only specbench's draft step calls it (the lean forward and the restricted
    head); a module's forward, which HF's generation runs, keeps PyTorch's kernel."""
    if x.device.type != "cpu" or not runs_int8(x) or scales.dtype != torch.bfloat16:
        return int8_linear(x, qweight, scales, bias)
    rows, width = x.numel() // x.shape[-1], x.shape[-1]
    x2 = x.reshape(rows, width).contiguous()
    qweight, scales = qweight.contiguous(), scales.contiguous()
    if bias is not None:
        bias = bias.to(torch.bfloat16).contiguous()
    if (gemv := native.kernel()) is not None:
        out = torch.empty(rows, qweight.shape[0], dtype=torch.bfloat16)
        status = gemv.specbench_int8_gemv(
            x2.data_ptr(),
            rows,
            width,
            qweight.data_ptr(),
            scales.data_ptr(),
            None if bias is None else bias.data_ptr(),
            qweight.shape[0],
            out.data_ptr(),
        )
        if status == 0:
            return out.reshape(*x.shape[:-1], qweight.shape[0])
    if native.linear_kernel() is not None:
        return native_int8_linear(x2, qweight, scales, bias).reshape(*x.shape[:-1], qweight.shape[0])
    return int8_linear(x, qweight, scales, bias)


# ---------------------------------------------------------------------------- the target


class Int8TargetLinear(torch.nn.Module):
    """y = x W^T + b for a target: W as int8 rows times one float32 scale per row, every
    row of x (float32) through int8_linear.c, so a row's result does not depend on how many
    rows share the call (see the module docstring). No dense copy is kept."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        qweight, scales = quantize_rows(linear.weight.detach(), torch.float32)
        self.register_buffer("qweight", qweight)  # [out, in] int8
        self.register_buffer("scales", scales)  # [out] float32
        bias = None if linear.bias is None else linear.bias.detach().float().contiguous()
        self.register_buffer("bias", bias)  # [out] float32 or None

    def forward(
        self,
        x: torch.Tensor,  # [..., in]
    ) -> torch.Tensor:
        return exact_int8_linear(x, self.qweight, self.scales, self.bias)


def exact_int8_linear(
    x: torch.Tensor,  # [..., in]
    qweight: torch.Tensor,  # [out, in] int8
    scales: torch.Tensor,  # [out]
    bias: torch.Tensor | None,  # [out] or None
) -> torch.Tensor:
    """x [..., in] (float32) times int8 rows qweight [out, in] with float32 scales [out], plus
    bias, through int8_linear.c: each row's result is exact up to one rounding of the
    integer dot product and the epilogue, whatever the other rows."""
    return native_int8_linear(x.float(), qweight, scales, bias).to(x.dtype)


def native_int8_linear(
    x: torch.Tensor,  # [..., in]
    qweight: torch.Tensor,  # [out, in] int8
    scales: torch.Tensor,  # [out]
    bias: torch.Tensor | None,  # [out] or None
) -> torch.Tensor:
    """int8_linear.c on x [..., in], float32 or bf16 (the output's dtype); scales and bias
    float32 or bf16 alike. Raises RuntimeError where the kernel is not built."""
    lib = native.linear_kernel()
    if lib is None:
        raise RuntimeError(f"the int8 linear kernel is not available: {native.linear_why_not()}")
    rows, width = x.numel() // x.shape[-1], x.shape[-1]
    x2 = x.reshape(rows, width).contiguous()
    qweight, scales = qweight.contiguous(), scales.contiguous()
    out = torch.empty(rows, qweight.shape[0], dtype=x.dtype)
    if bias is not None:
        bias = bias.to(scales.dtype).contiguous()
    x_bf16, p_bf16 = int(x.dtype == torch.bfloat16), int(scales.dtype == torch.bfloat16)
    if (
        rows
        and lib.specbench_int8_linear(
            x2.data_ptr(),
            x_bf16,
            rows,
            width,
            qweight.data_ptr(),
            scales.data_ptr(),
            None if bias is None else bias.data_ptr(),
            p_bf16,
            qweight.shape[0],
            out.data_ptr(),
        )
        != 0
    ):
        raise RuntimeError(f"int8_linear refused a call of {rows} x {width}")
    return out.reshape(*x.shape[:-1], qweight.shape[0])


def target_int8_why_not() -> str | None:
    """None where a target can be int8 on this machine, else one line on why not."""
    if (why := native.linear_why_not()) is not None:
        return f"the int8 target needs specbench's AVX2 kernel: {why}"
    return None


def quantize_target(model: torch.nn.Module) -> int:
    """Swap every float32 CPU nn.Linear of the model for an Int8TargetLinear; returns how
    many. The float32 weights are dropped (a tied head's stays with the embedding), and the
    tensors kept (embedding, norms) are copied out of the weights file that from_pretrained
    memory-maps: a view of the file keeps all of its pages mapped, the dropped ones too."""
    if (why := target_int8_why_not()) is not None:
        raise ValueError(why)
    swapped = swap_linears(model, (torch.float32,), Int8TargetLinear)
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.dtype != torch.int8:
                tensor.data = tensor.data.clone()
    gc.collect()  # the file's mapping closes with its last view
    return swapped


def quantize_rows(
    weight: torch.Tensor,  # [out, in]
    scale_dtype: torch.dtype = torch.bfloat16,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per output row: (q [out, in] int8, scale [out]), w ~ q * scale.
    Row by row in blocks, so a large float32 weight needs no float32 temporary of its size;
    a float32 or bfloat16 CPU weight goes through int8_linear.c's quantizer where it is
    built: the same operations in one pass (tested equal)."""
    q = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
    scales = torch.empty(weight.shape[0], dtype=scale_dtype, device=weight.device)
    native_dtypes = (torch.float32, torch.bfloat16)
    lib = (
        native.linear_kernel()
        if weight.dtype in native_dtypes and scale_dtype in native_dtypes and weight.device.type == "cpu"
        else None
    )
    if lib is not None and weight.dim() == 2 and weight.numel():
        w, bf16 = weight.contiguous(), torch.bfloat16
        if (
            lib.specbench_quantize_rows(
                w.data_ptr(),
                int(w.dtype == bf16),
                w.shape[0],
                w.shape[1],
                q.data_ptr(),
                scales.data_ptr(),
                int(scale_dtype == bf16),
            )
            == 0
        ):
            return q, scales
    for start in range(0, weight.shape[0], _QUANTIZE_BLOCK):
        w = weight[start : start + _QUANTIZE_BLOCK].float()
        s = (w.abs().amax(dim=1) / 127).clamp(min=1e-10).to(scale_dtype)
        scales[start : start + _QUANTIZE_BLOCK] = s
        q[start : start + _QUANTIZE_BLOCK] = torch.round(w / s.float()[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


_QUANTIZE_BLOCK = 4096  # weight rows quantized at a time


def dequantize_rows(
    qweight: torch.Tensor,  # [out, in] int8
    scales: torch.Tensor,  # [out]
) -> torch.Tensor:
    return (qweight.float() * scales.float()[:, None]).to(torch.bfloat16)


def quantize_linears(model: torch.nn.Module) -> int:
    """Swap every bf16 CPU nn.Linear of the model for an Int8Linear; returns how many.

    Tied weights (an lm_head sharing the embedding) stay tied to nothing: the embedding keeps
    its bf16 table and the head gets its own int8 copy.
    """
    if not int8_available():
        raise ValueError("this PyTorch build has no int8 weight-only kernel (torch._weight_int8pack_mm)")
    return swap_linears(model, (torch.bfloat16,), Int8Linear)
