"""Building a model in the form it runs, one tensor at a time: the loading path of every
quantized model (`--dtype q4k` or `int8`, `--draft-dtype q4k` or `int8`), the embedded pair's
and any GGUF file or safetensors checkpoint a user brings.

Why: loading with transformers and then swapping layers holds a whole dense copy first (a
7B target in float32 is 30 GB) before a byte of it is quantized. Here the module is built
without weights (accelerate's init_empty_weights: parameters on the meta device, buffers
real), and each tensor of the source is read alone (a GGUF tensor with one file read, a
safetensors tensor through safe_open), turned into what the model runs, and put in place:

- a target's Linear weight stored as Q4_K or Q6_K, with `--dtype q4k`: the blocks as they
  are (gguf_blocks.Q4KLinear, Q6KLinear); rows reordered only where transformers' own tensor
  processor for the architecture reorders them (llama's q and k), found by running that
  processor on the row indices, so a processor that does anything but reorder rows sends
  the tensor down the dense path instead;
- any other Linear weight, dequantized alone: a target's int8 rows (quantize.Int8TargetLinear,
  from float32), a drafter's Q4_K blocks (quantize_q4k, from bf16) or int8 rows
  (quantize.Int8Linear, from bf16); a q4k drafter's head is int8 rows with its first
  HEAD_Q4K_ROWS rows also as Q4_K blocks, which its draft step reads in their place
  (speed/draft_vocab.py);
- an embedding table: its rows as stored (row_embedding.RowEmbedding), never dense;
- everything else (norms, biases, a head tied to the embedding): dense, in the model's dtype.

These are the layers the two-step path made, from the same float values, so a built model
computes what that one did, bit for bit (tests/models/test_build.py). Peak memory while
building is the built model plus the largest tensor dense plus its quantized copy: source
bytes come from file reads, not a memory map, so the source's pages never count as the
process's memory. prepared.py saves the result once; later runs map it.

Names no model and prints nothing; progress goes through a callback.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from specbench.errors import ModelError
from specbench.models.options import DEFAULT_DRAFT_VOCAB
from specbench.speed import native
from specbench.speed.gguf_blocks import (
    QK,
    Q4KLinear,
    Q6KLinear,
    quantize_q4k,
    random_q4k,
    random_q6k,
    repack,
    repack_q6k,
)
from specbench.speed.quantize import Int8Linear, Int8TargetLinear
from specbench.speed.row_embedding import DENSE_TYPES, RowEmbedding, dequantize_rows

# a q4k drafter's head rows also held as Q4_K blocks: those a default draft step reads (ids
# below the default draft vocabulary; any other limit reads them the same way)
HEAD_Q4K_ROWS = DEFAULT_DRAFT_VOCAB

Q4_K, Q6_K = 12, 14  # ggml type ids kept as blocks in a q4k target


@dataclass(frozen=True)
class RunFormat:
    """What a model is built as: role "target" or "drafter", dtype "q4k" or "int8"."""

    role: str
    dtype: str

    @property
    def float_dtype(self) -> torch.dtype:
        """The dtype of what stays dense (a target computes in float32, a drafter in bf16)."""
        return torch.float32 if self.role == "target" else torch.bfloat16

    @property
    def keeps_blocks(self) -> bool:
        return self.role == "target" and self.dtype == "q4k"


@dataclass
class StoredTensor:
    """One tensor of the source, read: its rows as stored ([rows, row bytes] of ggml type
    qtype, in the model's row order) where they can be used as they are, and its dense value."""

    name: str  # the model's parameter name
    shape: tuple[int, ...]  # the parameter's shape
    qtype: int
    rows: np.ndarray | None  # [shape[0], row bytes] uint8; None where only the dense value fits
    dense_value: Callable[[], np.ndarray]  # float32, shape

    def dense(self, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(self.dense_value(), dtype=np.float32).reshape(self.shape)).to(
            dtype
        )


# ---------------------------------------------------------------------------- the model


def empty_model(config, dtype: torch.dtype):
    """The causal LM of config with its parameters on the meta device (its buffers, such as
    rotary frequencies, computed on the CPU)."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def build(model, tensors: Iterator[StoredTensor], run: RunFormat, name: str, progress=None, total: int | None = None):
    """model (empty_model's, in run.float_dtype) with every tensor from `tensors` placed in
    its run format (see the module docstring); ModelError (one line) for a tensor it lacks
    or cannot place."""
    modules = dict(model.named_modules())
    head = model.get_output_embeddings()
    head_name = next((n for n, m in modules.items() if m is head and n), None)
    biases: dict[str, torch.Tensor] = {}
    done = 0
    for stored in tensors:
        done += 1
        if progress is not None:
            progress(done, total)
        module_name, _, leaf = stored.name.rpartition(".")
        module = modules.get(module_name)
        if module is None or not hasattr(module, leaf):
            continue  # a tensor the model has no place for (transformers' loader skips those too)
        if type(module) is torch.nn.Linear and leaf == "bias":
            biases[module_name] = stored.dense(run.float_dtype)
        elif type(module) is torch.nn.Linear and leaf == "weight":
            layer = linear_layer(stored, run, is_head=module_name == head_name)
            model.set_submodule(module_name, layer)
            modules[module_name] = layer
        elif type(module) is torch.nn.Embedding and leaf == "weight":
            embedding = row_embedding(stored, run.float_dtype)
            model.set_submodule(module_name, embedding)
            modules[module_name] = embedding
        else:
            _set_dense(module, leaf, stored.dense(run.float_dtype))
    if head_name is not None and _tied(model, modules[head_name]):
        model.set_submodule(head_name, _tied_head(model.get_input_embeddings(), head_name, run))
        modules[head_name] = model.get_submodule(head_name)
    for module_name, bias in biases.items():
        _give_bias(modules[module_name], bias)
    missing = [n for n, p in [*model.named_parameters(), *model.named_buffers()] if p.is_meta]
    if missing:
        raise ModelError(
            f"cannot build {name}: its weights have no {missing[0]}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    return model


def _tied(model, head) -> bool:
    """Whether the head reads the input embedding's table (tie_word_embeddings) and the source
    held no weight of its own for it (a GGUF without output.weight, a checkpoint saved tied)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return type(head) is torch.nn.Linear and head.weight.is_meta and bool(getattr(config, "tie_word_embeddings", False))


def _tied_head(embedding: torch.nn.Module, head_name: str, run: RunFormat) -> torch.nn.Module:
    """A tied head's layer, from the embedding table's values (every row looked up: the one
    tensor made dense) in the model's dtype, as the tied dense head computed with them."""
    if not isinstance(embedding, RowEmbedding):
        raise ModelError(f"cannot build a head tied to a {type(embedding).__name__}")
    weight = embedding(torch.arange(embedding.num_embeddings))
    return linear_layer(_dense_stored(f"{head_name}.weight", weight), run, is_head=True)


def linear_layer(stored: StoredTensor, run: RunFormat, is_head: bool) -> torch.nn.Module:
    """What a Linear weight runs as (bias added later by _give_bias)."""
    if run.keeps_blocks and stored.rows is not None and (layer := _block_layer(stored)) is not None:
        return layer
    weight = stored.dense(run.float_dtype)
    linear = SimpleNamespace(in_features=weight.shape[1], out_features=weight.shape[0], weight=weight, bias=None)
    if run.role == "target":
        return Int8TargetLinear(linear)
    if run.dtype == "q4k" and not is_head:
        return Q4KLinear(quantize_q4k(weight), None, weight.shape[1])
    layer = Int8Linear(linear)
    if run.dtype == "q4k":  # a q4k drafter's head: the rows a default draft step reads as Q4_K too
        layer.hold_q4k_rows(quantize_q4k(weight[:HEAD_Q4K_ROWS]))
    return layer


def _block_layer(stored: StoredTensor) -> torch.nn.Module | None:
    """The stored Q4_K (or, where q6k_linear.c is built, Q6_K) blocks as a layer; None for
    another type."""
    if stored.qtype == Q4_K:
        return Q4KLinear(repack(stored.rows), None)
    if stored.qtype == Q6_K and native.q6k_kernel() is not None:
        return Q6KLinear(repack_q6k(stored.rows), None)
    return None


def row_embedding(stored: StoredTensor, dtype: torch.dtype) -> torch.nn.Module:
    """An embedding over the stored rows (dense rows of the table where the stored ones
    cannot be used as they are)."""
    rows, qtype = stored.rows, stored.qtype
    if rows is None:
        table = stored.dense(torch.float32)
        rows, qtype = table.view(torch.uint8).numpy(), DENSE_TYPES[torch.float32]
    return RowEmbedding(torch.from_numpy(np.ascontiguousarray(rows)), qtype, stored.shape[1], dtype)


def _dense_stored(name: str, weight: torch.Tensor) -> StoredTensor:
    return StoredTensor(name, tuple(weight.shape), DENSE_TYPES[torch.float32], None, lambda: weight.float().numpy())


def _set_dense(module: torch.nn.Module, leaf: str, value: torch.Tensor) -> None:
    old = getattr(module, leaf)
    if old is not None and tuple(old.shape) != tuple(value.shape):
        raise ModelError(f"a tensor of shape {tuple(value.shape)} cannot fill {leaf} of shape {tuple(old.shape)}")
    if leaf in module._parameters:
        module._parameters[leaf] = torch.nn.Parameter(value, requires_grad=False)
    else:
        module._buffers[leaf] = value


def _give_bias(layer: torch.nn.Module, bias: torch.Tensor) -> None:
    """A built Linear layer's bias, in the dtype that layer keeps it in."""
    if type(layer) is torch.nn.Linear:
        _set_dense(layer, "bias", bias)
        return
    kept = torch.bfloat16 if isinstance(layer, Int8Linear) else torch.float32
    layer.register_buffer("bias", bias.to(kept).contiguous())


# ---------------------------------------------------------------------------- GGUF files


def processor_config(path: Path) -> dict:
    """The GGUF file's metadata as transformers' tensor processor for it takes it."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    return load_gguf_checkpoint(str(path), return_tensors=False)["config"]


def gguf_tensors(path: Path, model, processor_config: dict) -> tuple[Iterator[StoredTensor], int]:
    """(each tensor of the GGUF file under the model's parameter name, read one at a time;
    how many). Names and values go through transformers' tensor processor for the file's
    architecture, as its own GGUF loader does."""
    import gguf
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map

    reader = gguf.GGUFReader(str(path))
    architecture = _architecture(reader)
    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=processor_config)
    names = get_gguf_hf_weights_map(model, processor)
    infos = list(reader.tensors)

    def each() -> Iterator[StoredTensor]:
        for info in infos:
            yield from _gguf_tensor(path, info, processor, names)

    return each(), len(infos)


def _architecture(reader) -> str:
    field = reader.fields.get("general.architecture")
    return bytes(field.parts[field.data[0]]).decode() if field is not None else ""


def _gguf_tensor(path: Path, info, processor, names: dict[str, str]) -> Iterator[StoredTensor]:
    """The StoredTensors one GGUF tensor becomes (none for a tensor the model does not
    name; several where the processor splits it, as for experts)."""
    from gguf import GGMLQuantizationType

    qtype = int(info.tensor_type)
    shape = tuple(int(n) for n in reversed(info.shape))  # numpy order: the slowest dimension first
    rows_count = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    raw = np.fromfile(path, dtype=np.uint8, count=int(info.n_bytes), offset=int(info.data_offset))
    if raw.size != int(info.n_bytes):
        raise EOFError(f"{path.name} ends inside tensor {info.name}")
    raw = raw.reshape(rows_count, -1)
    try:
        GGMLQuantizationType(qtype)
    except ValueError:
        raise ModelError(
            f"{path.name}: tensor {info.name} has ggml type {qtype}, which gguf-py does not know; "
            "re-quantize the file to Q4_K_M or Q8_0 with llama.cpp"
        ) from None

    def dense() -> np.ndarray:
        try:
            return dequantize_rows(raw, qtype).reshape(shape)
        except NotImplementedError:
            kind = GGMLQuantizationType(qtype).name
            raise ModelError(
                f"{path.name}: tensor {info.name} is {kind}, which no dequantizer here reads; "
                "re-quantize the file to Q4_K_M or Q8_0 with llama.cpp"
            ) from None

    order = _row_order(processor, info.name, shape, names) if len(shape) == 2 else None
    if order is not None:
        hf_name, permutation = order
        rows = raw if permutation is None else raw[permutation]
        permuted = (lambda: dense()) if permutation is None else (lambda: dense()[permutation])
        yield StoredTensor(hf_name, shape, qtype, rows, permuted)
        return
    parsed = {"tensors": {}}
    result = processor.process(weights=dense(), name=info.name, tensor_key_mapping=names, parsed_parameters=parsed)
    found = [(result.name, result.weights)] if result.name in names and result.weights is not None else []
    found += list(parsed["tensors"].items())
    for hf_name, value in found:
        hf_name = names.get(hf_name, hf_name)
        value = np.asarray(value.numpy() if isinstance(value, torch.Tensor) else value, dtype=np.float32)
        yield StoredTensor(hf_name, tuple(value.shape), DENSE_TYPES[torch.float32], None, lambda v=value: v)


def _row_order(
    processor, gguf_name: str, shape: tuple[int, int], names: dict[str, str]
) -> tuple[str, np.ndarray | None] | None:
    """(the model's name, the row permutation; None for none) where the processor does no
    more to this 2-d tensor than rename it and reorder its rows; None where it does more
    (or the model has no such tensor). Found by processing the row indices instead of the
    values: the processors only reshape and swap axes."""
    rows = shape[0]
    index = np.arange(rows, dtype=np.float64).reshape(rows, 1)
    parsed = {"tensors": {}}
    try:
        result = processor.process(weights=index, name=gguf_name, tensor_key_mapping=names, parsed_parameters=parsed)
    except (ValueError, IndexError, TypeError, KeyError):
        return None
    if parsed["tensors"] or result.name not in names or result.weights is None:
        return None
    out = np.asarray(result.weights)
    if out.shape != (rows, 1) or not np.array_equal(np.sort(out[:, 0]), index[:, 0]):
        return None
    permutation = out[:, 0].astype(np.int64)
    return names[result.name], None if np.array_equal(permutation, index[:, 0]) else permutation


# ---------------------------------------------------------------------------- random weights


def random_tensors(model, run: RunFormat, seed: int = 0, std: float = 0.02) -> Iterator[StoredTensor]:
    """A tensor for each parameter of model (built by empty_model), drawn one at a time: for
    a q4k target, its Linear weights and embedding as random Q4_K blocks and its head as Q6_K
    (a Q4_K_M file's layout) where the width is a multiple of 256; norms at 1; everything
    else Gaussian with std `std`. The parameters are listed now, before build replaces the
    model's layers."""
    head = model.get_output_embeddings()
    kinds = {id(m.weight): (m is head) for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))}
    plan = [(name, tuple(param.shape), kinds.get(id(param))) for name, param in model.named_parameters()]

    def each() -> Iterator[StoredTensor]:
        rng = np.random.default_rng(seed)
        for name, shape, as_head in plan:
            if run.keeps_blocks and as_head is not None and len(shape) == 2 and shape[1] % QK == 0:
                qtype, draw = (Q6_K, random_q6k) if as_head else (Q4_K, random_q4k)
                rows = draw(shape[0], shape[1], rng, std)
                yield StoredTensor(
                    name, shape, qtype, rows, lambda rows=rows, qtype=qtype: dequantize_rows(rows, qtype)
                )
                continue
            value = (
                np.ones(shape, np.float32)
                if name.endswith("norm.weight")
                else (rng.standard_normal(shape, dtype=np.float32) * std)
            )
            yield StoredTensor(name, shape, DENSE_TYPES[torch.float32], None, lambda value=value: value)

    return each()


# ---------------------------------------------------------------------------- safetensors


def safetensors_tensors(folder: Path) -> tuple[Iterator[StoredTensor], int]:
    """(each tensor of a save_pretrained folder's safetensors shards, read one at a time
    through safe_open; how many). Names are the checkpoint's own."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
    keys = []
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            keys += [(file, key) for key in handle.keys()]

    def each() -> Iterator[StoredTensor]:
        for file, key in keys:
            with safe_open(
                str(file), framework="pt"
            ) as handle:  # closed after each tensor: its pages leave the process
                tensor = handle.get_tensor(key)
            yield _safetensors_tensor(key, tensor)

    return each(), len(keys)


def _safetensors_tensor(name: str, tensor: torch.Tensor) -> StoredTensor:
    shape = tuple(tensor.shape)
    qtype = DENSE_TYPES.get(tensor.dtype)
    rows = tensor.contiguous().view(torch.uint8).numpy() if qtype is not None and tensor.dim() == 2 else None
    return StoredTensor(
        name, shape, DENSE_TYPES[torch.float32] if qtype is None else qtype, rows, lambda: tensor.float().numpy()
    )
