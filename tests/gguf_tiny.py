"""Tiny Q4_K and Q6_K blocks and GGUF files, and references of the Q4_K and Q6_K kernels,
for tests of q4k layers (gguf_blocks.py, prepared.py)."""

from __future__ import annotations

import numpy as np
import torch
from conftest import tiny_model

from specbench.speed import native
from specbench.speed.gguf_blocks import (
    BLOCK_BYTES,
    Q6K_BLOCK_BYTES,
    QK,
    Q4KLinear,
    Q6KLinear,
    dequantize,
    dequantize_q6k,
    nibbles,
    q4k_why_not,
    q6k_values,
    quantize_q4k,
    repack,
    repack_q6k,
    to_file_order,
)

HIDDEN = 256  # Q4_K needs widths that are multiples of 256


def random_q4k(rows: int, cols: int, seed: int, scale: float = 0.002) -> np.ndarray:
    """Valid Q4_K bytes [rows, cols / 256 * 144]: small positive float16 d and dmin, any
    scale bytes and nibbles."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(rows, cols // QK, BLOCK_BYTES), dtype=np.uint8)
    d = (rng.uniform(0.2, 1.0, size=(rows, cols // QK, 2)) * scale).astype(np.float16)
    blocks[..., 0:4] = d.view(np.uint8).reshape(rows, cols // QK, 4)
    return blocks.reshape(rows, -1)


def random_q6k(rows: int, cols: int, seed: int, scale: float = 0.0005) -> np.ndarray:
    """Valid Q6_K bytes [rows, cols / 256 * 210]: any low and high bits and int8 scales, a
    small positive float16 d."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(rows, cols // QK, Q6K_BLOCK_BYTES), dtype=np.uint8)
    d = (rng.uniform(0.2, 1.0, size=(rows, cols // QK, 1)) * scale).astype(np.float16)
    blocks[..., 208:210] = d.view(np.uint8).reshape(rows, cols // QK, 2)
    return blocks.reshape(rows, -1)


def _int8_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q4k_linear.c's quantize_row: int8 [M, nsb, 256] (as int64) and scales [M, nsb]."""
    rows, width = x.shape
    xb = x.reshape(rows, width // QK, QK)
    amax = xb.abs().amax(dim=-1)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    return torch.round(xb * inv[..., None]).clamp(-127, 127).long(), scale


def _hsum(acc: torch.Tensor) -> torch.Tensor:
    """The kernels' fixed horizontal sum of 8 lanes: (l0 + l4) + (l2 + l6) + ((l1 + l5) + (l3 + l7))."""
    s4 = acc[..., :4] + acc[..., 4:]
    return (s4[..., 0] + s4[..., 2]) + (s4[..., 1] + s4[..., 3])


def q6k_reference(x: torch.Tensor, layer: Q6KLinear) -> torch.Tensor:
    """q6k_linear.c's contract in PyTorch, operation for operation: int8 activations per 256
    columns; each super-block's integer sums in the kernel's 8 lanes (lane l: columns 4l to
    4l + 3 of every 32 in the file's order, sub-blocks 2l and 2l + 1 in the lane order, times
    their sub-block's scale, less 32 times sub-blocks 2l and 2l + 1's activation sums times
    their scales); then float32 accumulation and the fixed horizontal sum."""
    rows, width = x.shape
    nsb = width // QK
    xq, scale = _int8_activations(x)
    q = q6k_values(layer.ql, layer.qh).long()  # [N, nsb, 256]
    sc = layer.sc.long()  # [N, nsb, 16]
    acc = torch.zeros(rows, layer.out_features, 8)
    for s in range(nsb):
        per_column = q[:, s] * sc[:, s].repeat_interleave(16, dim=-1)  # [N, 256]
        if layer.lanes:  # lane l: sub-blocks 2l and 2l + 1
            lanes = torch.einsum("mlc,nlc->mnl", xq[:, s].reshape(rows, 8, 32), per_column.reshape(-1, 8, 32))
        else:  # lane l: columns 4l..4l+3 of every 32 ([chunk, lane, 4])
            lanes = torch.einsum(
                "mklc,nklc->mnl", xq[:, s].reshape(rows, 8, 8, 4), per_column.reshape(-1, 8, 8, 4)
            )  # exact int64
        bsum16 = xq[:, s].reshape(rows, 16, 16).sum(-1)  # [M, sub-block]
        offset = (sc[None, :, s] * bsum16[:, None, :]).reshape(rows, -1, 8, 2).sum(-1)  # [M, N, 8]
        ds = layer.d[None, :, s] * scale[:, s, None]  # float32 products, as in the kernel
        acc = acc + (lanes - 32 * offset).float() * ds[..., None]
    total = _hsum(acc)
    return total if layer.bias is None else total + layer.bias


def q4k_reference(x: torch.Tensor, layer: Q4KLinear) -> torch.Tensor:
    """q4k_linear.c's contract in PyTorch, operation for operation, in every build: int8
    activations per 256 columns, each super-block's integer sums in the kernel's 8 lanes
    (lane l: sub-block l, times its scale) and the mins' 4, then float32 accumulation over
    super-blocks and the kernel's fixed horizontal sums."""
    rows, width = x.shape
    nsb = width // QK
    xq, scale = _int8_activations(x)  # [M, nsb, 256]
    q = nibbles(to_file_order(layer.qs)).reshape(-1, nsb, 8, 32).long()  # [N, nsb, sub, 32]
    sc, mins = layer.sm[..., :8].long(), layer.sm[..., 8:].long()
    acc = torch.zeros(rows, layer.out_features, 8)
    accm = torch.zeros(rows, layer.out_features, 4)
    for s in range(nsb):
        xs = xq[:, s].reshape(rows, 8, 32)  # [M, sub-block, column]
        lanes = torch.einsum("mjc,njc,nj->mnj", xs, q[:, s], sc[:, s])  # exact int64; lane j: sub-block j
        bsum = xs.sum(-1)  # [M, sub-block]
        mlanes = (mins[None, :, s] * bsum[:, None, :]).reshape(rows, -1, 4, 2).sum(-1)  # [M, N, 4]
        ds = layer.d[None, :, s] * scale[:, s, None]  # float32 products, as in the kernel
        dm = layer.dmin[None, :, s] * scale[:, s, None]
        acc = acc + lanes.float() * ds[..., None]
        accm = accm + mlanes.float() * dm[..., None]
    total = _hsum(acc) - ((accm[..., 0] + accm[..., 2]) + (accm[..., 1] + accm[..., 3]))
    return total if layer.bias is None else total + layer.bias


GGUF_NAMES = {  # Qwen2's Linear layers and their GGUF tensor names
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


Q4_K_M_LIKE = ("blk.0.ffn_down", "blk.1.attn_v", "output")  # written as Q6_K, as a Q4_K_M file keeps some layers


def q4k_weights(model, seed: int, q6k: tuple[str, ...] = ()) -> dict[str, tuple[torch.nn.Linear, np.ndarray, bool]]:
    """Give every Linear of a tiny Qwen2 (hidden 256) random Q4_K blocks (Q6_K for the GGUF
    names in q6k), dequantized, as its weight; returns GGUF tensor name
    ("blk.0.attn_q.weight", "output.weight") -> (the layer, its blocks, whether Q6_K)."""
    named = {"output": model.lm_head}
    for i, layer in enumerate(model.model.layers):
        for hf, gguf_name in GGUF_NAMES.items():
            named[f"blk.{i}.{gguf_name}"] = layer.get_submodule(hf)
    found = {}
    for k, (name, linear) in enumerate(named.items()):
        six = name in q6k
        raw = (random_q6k if six else random_q4k)(
            linear.out_features, linear.in_features, seed=100 * seed + k, scale=0.005 if six else 0.02
        )
        with torch.no_grad():
            linear.weight.copy_(dequantize_q6k(**repack_q6k(raw)) if six else dequantize(**repack(raw)))
        found[name + ".weight"] = (linear, raw, six)
    return found


def q4k_model_and_file(tmp_path, seed: int = 0, skip: str | None = None, q6k: tuple[str, ...] = ()):
    """A tiny Qwen2 (hidden 256) whose every Linear weight is random Q4_K blocks (Q6_K for the
    GGUF names in q6k) dequantized, and a GGUF file holding only those blocks (under the names
    llama.cpp gives them); `skip`: one GGUF name written as float32 instead."""
    from gguf import GGMLQuantizationType, GGUFWriter

    model = tiny_model(seed, hidden=HIDDEN)
    writer = GGUFWriter(str(tmp_path / "tiny.gguf"), "qwen2")
    for name, (linear, raw, six) in q4k_weights(model, seed, q6k).items():
        if name == f"{skip}.weight":
            writer.add_tensor(name, linear.weight.detach().numpy())
        else:
            writer.add_tensor(name, raw, raw_dtype=GGMLQuantizationType.Q6_K if six else GGMLQuantizationType.Q4_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model, tmp_path / "tiny.gguf"


def q4k_target(tmp_path, seed: int = 0, q6k: tuple[str, ...] = ()):
    """A tiny q4k target: q4k_model_and_file's model with the file's Q4_K (and Q6_K) blocks
    swapped in for every Linear, as a q4k target is made."""
    model, path = q4k_model_and_file(tmp_path, seed, q6k=q6k)
    assert use_gguf_blocks(model, str(path)) == (2 * 7 + 1, 0)
    assert sum(isinstance(m, Q6KLinear) for m in model.modules()) == len(q6k)
    return model


def q4k_gguf_with_tokenizer(path, seed: int = 0):
    """A tiny Qwen2 (hidden 256) with Q4_K and Q6_K weights (Q4_K_M_LIKE), written as a
    complete GGUF (the character tokenizer, norms and embedding in float32, every Linear
    as blocks): what the default target's file is, in small. Returns (the model, the path)."""
    from gguf import GGMLQuantizationType
    from tiny_hf import write_tiny_gguf

    model = tiny_model(seed, hidden=HIDDEN)
    types = {False: GGMLQuantizationType.Q4_K, True: GGMLQuantizationType.Q6_K}
    blocks = {name: (types[six], raw) for name, (_, raw, six) in q4k_weights(model, seed, Q4_K_M_LIKE).items()}
    return model, write_tiny_gguf(path, model, raw=blocks)


# ---------------------------------------------------------------------------- the two-step reference
# How a q4k model was made before models/build.py: loaded dense by transformers, then its
# layers swapped for the file's blocks (checked against the dense weight on sampled rows)
# or quantized. Kept here as the reference the builder is tested against, and as a quick
# way to give an in-memory tiny model q4k layers.


def block_tensors(gguf_path: str) -> tuple[str, dict[str, tuple[int, np.ndarray]]]:
    """(the file's general.architecture, GGUF tensor name -> (its ggml type, its bytes [rows,
    row bytes]) for the file's Q4_K and Q6_K tensors, memory-mapped). gguf_file's index, not
    gguf-py's GGUFReader: that one parses every metadata value (a 151k-token vocabulary: seconds)."""
    from specbench.speed.gguf_file import Q4_K, Q6_K, read_tensor_index

    block_bytes = {Q4_K: BLOCK_BYTES, Q6_K: Q6K_BLOCK_BYTES}
    index = read_tensor_index(gguf_path)
    data = np.memmap(gguf_path, dtype=np.uint8, mode="r")
    found = {}
    for tensor in index.tensors:
        if tensor.type in block_bytes and len(tensor.shape) == 2:
            cols, rows = tensor.shape  # GGUF lists the fastest-varying dimension first
            row_bytes = cols // QK * block_bytes[tensor.type]
            start = index.data_offset + tensor.offset
            found[tensor.name] = (tensor.type, data[start : start + rows * row_bytes].reshape(rows, row_bytes))
    return index.architecture, found


def gguf_to_hf_names(model, architecture: str) -> dict[str, str]:
    """GGUF tensor name -> the model's Linear weight names, by gguf-py's name map for the
    file's architecture (the map transformers' GGUF loader uses); {} for an unknown one."""
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

    arch = next((key for key, value in MODEL_ARCH_NAMES.items() if value == architecture), None)
    if arch is None:
        return {}
    layers = getattr(model.config, "num_hidden_layers", 0)
    name_map = get_tensor_name_map(arch, layers)
    names = {}
    for module_name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            parts = module_name.split(".")
            for i in range(len(parts)):  # "model.layers.0.mlp.up_proj", then "layers.0.mlp.up_proj", ...
                if (gguf_name := name_map.get_name(".".join(parts[i:]))) is not None:
                    names[gguf_name + ".weight"] = module_name + ".weight"
                    break
    return names


def use_gguf_blocks(model: torch.nn.Module, gguf_path: str) -> tuple[int, int]:
    """Swap every float32 nn.Linear whose weight is a Q4_K (or, where q6k_linear.c is built,
    Q6_K) tensor of the GGUF file, checked on sampled rows, for a Q4KLinear (Q6KLinear);
    returns (swapped, Linear layers left as they were). Raises ValueError where the Q4_K
    kernel cannot run here."""
    from specbench.speed.gguf_file import Q4_K, Q6_K

    if (why := q4k_why_not()) is not None:
        raise ValueError(why)
    kinds = {Q4_K: (repack, dequantize, Q4KLinear)}
    if native.q6k_kernel() is not None:
        kinds[Q6_K] = (repack_q6k, dequantize_q6k, Q6KLinear)
    modules = dict(model.named_modules())
    architecture, tensors = block_tensors(gguf_path)
    names = gguf_to_hf_names(model, architecture)
    swapped = 0
    for gguf_name, (kind, raw) in tensors.items():
        module_name = names.get(gguf_name, "").removesuffix(".weight")
        linear = modules.get(module_name) if module_name else None
        if kind not in kinds or not isinstance(linear, torch.nn.Linear) or linear.weight.dtype != torch.float32:
            continue
        unpack, dequantizer, cls = kinds[kind]
        blocks = unpack(raw)
        if _matches(blocks, dequantizer, linear.weight):
            model.set_submodule(module_name, cls(blocks, linear.bias))
            swapped += 1
    left = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    return swapped, left


def quantize_to_q4k(model: torch.nn.Module) -> int:
    """Swap every nn.Linear of the model's decoder (not its output head, which
    speed/draft_vocab.py scores in part) for a Q4KLinear of quantize_q4k's blocks; returns
    how many. For drafters only: the weights change, which a target must not."""
    if (why := q4k_why_not()) is not None:
        raise ValueError(why)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    swapped = 0
    for name, module in list(model.named_modules()):
        if isinstance(module, torch.nn.Linear) and module is not head:
            model.set_submodule(name, Q4KLinear(quantize_q4k(module.weight), module.bias, module.in_features))
            swapped += 1
    return swapped


def _matches(blocks: dict[str, torch.Tensor], dequantizer, weight: torch.Tensor) -> bool:
    """Whether the blocks dequantize to the weight, bit for bit, on its first, middle and last rows."""
    rows = blocks["d"].shape[0]
    if tuple(weight.shape) != (rows, blocks["d"].shape[1] * QK):
        return False
    picks = sorted({0, rows // 2, rows - 1})
    sample = {k: v[picks] for k, v in blocks.items()}
    return torch.equal(dequantizer(**sample), weight.detach()[picks].float())
