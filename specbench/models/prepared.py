"""A prepared model, cached: a default model's every tensor in its q4k dtype, ready to run, in one file.

Why: preparing a q4k model takes the longest part of a warm start: for the target, loading
its weights and repacking the GGUF's Q4_K and Q6_K blocks; for the drafter, quantizing
every layer to Q4_K (gguf_blocks.quantize_q4k). The result is deterministic, so the first
run saves it (`q4k.safetensors` in the model's cache folder, `q4k-lanes.safetensors` for a
build whose Q6_K kernel reads lane order; most of the default target's is its blocks and its
float32 embedding) and later runs map that file: the model is built on the meta device,
its Linear layers become empty Q4KLinear, Q6KLinear, Int8TargetLinear or Int8Linear shells,
and the file's tensors are assigned to them without a copy (safetensors memory-maps; the
embedding's unused rows are never read in).

Knows nothing about which dtype is asked for; model.py decides when to use it. A file
from another layout (PREPARED_FORMAT), with its Q6_K values in another order than this
build's kernel reads (gguf_blocks.q6k_to_kernel_order), or with missing tensors is not used,
and rebuilt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from specbench.speed import native
from specbench.speed.gguf_blocks import Q4KLinear, Q6KLinear
from specbench.speed.quantize import Int8Linear, Int8TargetLinear, dense_twin
from specbench.speed.row_embedding import RowEmbedding

PREPARED_FORMAT = 6  # bump when a layer's buffers, or the order of their values, change
_LAYERS = {"q4k": Q4KLinear, "q6k": Q6KLinear, "int8": Int8TargetLinear, "int8-draft": Int8Linear, "rows": RowEmbedding}


def prepared_path(folder: Path, role: str, dtype: str) -> Path:
    """Where a prepared model lives in its cache folder: one file per role and dtype (a
    file can be a target and a drafter, built differently), and per block order, so that
    builds of both orders (`SPECBENCH_MARCH=x86-64-v3` beside the native build, or one cache
    shared by machines with and without VNNI) each keep their own instead of preparing the
    model again, over the other's file, at every switch."""
    order = "-lanes" if native.lane_order() else ""
    return folder / f"{role}-{dtype}{order}.safetensors"


def save_prepared(model, path: Path) -> None:
    """Write every tensor of the model and which layers are which (atomically: a temporary
    name, then a rename)."""
    from safetensors.torch import save_file

    layers = {
        name: _describe(kind, module)
        for name, module in model.named_modules()
        for kind, cls in _LAYERS.items()
        if type(module) is cls
    }
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    metadata = {
        "format": str(PREPARED_FORMAT),
        "layers": json.dumps(layers),
        "dtype": str(model.dtype).removeprefix("torch."),
        "lane_order": str(int(native.lane_order())),
    }
    partial = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    try:
        save_file(_untie(state), str(partial), metadata=metadata)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _describe(kind: str, module) -> list:
    """A layer's entry in the file's metadata: its kind and what its buffers do not say."""
    if kind == "rows":
        return [kind, module.embedding_dim, module.qtype, str(module.out_dtype).removeprefix("torch.")]
    return [kind, module.in_features]


def _untie(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors that share memory: clone all but the first of each."""
    seen, out = set(), {}
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        out[name] = tensor.clone() if key in seen else tensor
        seen.add(key)
    return out


def load_prepared(folder: str, path: Path):
    """The model saved at path (built from folder's config), or None when there is no usable file."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
        if metadata.get("format") != str(PREPARED_FORMAT) or metadata.get("lane_order", "0") != str(
            int(native.lane_order())
        ):
            return None  # another layout, or blocks in another order than this build's kernels read
        layers = json.loads(metadata["layers"])
        state = load_file(str(path))
    except (OSError, ValueError, KeyError, SafetensorError):
        return None
    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, metadata.get("dtype", "float32")))
    for name, (kind, in_features, *extra) in layers.items():
        model.set_submodule(name, _shell(_LAYERS[kind], name, in_features, state, extra))
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError:
        return None
    _rebuild_rotary(model)
    for module in model.modules():
        if type(module) is Int8Linear:  # its dense twin only where int8_linear.c is not built
            module.dense = (
                None if native.linear_kernel() is not None else dense_twin(module.qweight, module.scales, module.bias)
            )
    if any(t.is_meta for t in [*model.parameters(), *model.buffers()]):
        return None
    try:
        model.generation_config = GenerationConfig.from_pretrained(folder)
    except OSError:  # a checkpoint saved without one: what from_pretrained derives too
        model.generation_config = GenerationConfig.from_model_config(config)
    return model.eval()


def _shell(cls, name: str, in_features: int, state: dict[str, torch.Tensor], extra: list) -> torch.nn.Module:
    """An empty layer of cls whose buffers load_state_dict(assign=True) replaces."""
    if cls is RowEmbedding:
        qtype, dtype = extra
        return RowEmbedding(
            torch.empty_like(state[f"{name}.rows"], device="meta"), qtype, in_features, getattr(torch, dtype)
        )
    module = cls.__new__(cls)
    torch.nn.Module.__init__(module)
    prefix = name + "."
    for key, tensor in state.items():
        if key.startswith(prefix) and "." not in key[len(prefix) :]:
            module.register_buffer(key[len(prefix) :], torch.empty_like(tensor, device="meta"))
    if "bias" not in module._buffers:
        module.register_buffer("bias", None)
    module.out_features = (module.d if cls in (Q4KLinear, Q6KLinear) else module.qweight).shape[0]
    module.in_features = in_features
    if cls is Q6KLinear:
        module.lanes = native.lane_order()  # load_prepared checked the file's order against it
    return module


def _rebuild_rotary(model) -> None:
    """Rotary embeddings keep their frequencies in non-persistent buffers, which no state
    dict holds: build those modules again on the CPU."""
    for name, module in list(model.named_modules()):
        if name and any(b is not None and b.is_meta for b in module._buffers.values()) and hasattr(module, "rope_type"):
            model.set_submodule(name, type(module)(config=model.config))
