"""Random-weight GGUFs with the real shapes of Qwen2.5 1.5B, 3B, 7B and 14B, laid out as
llama.cpp's Q4_K_M files are: targets for the scale benchmark (dev/scale.py).

Why: a target step costs its weight bytes, so how specbench loads and decodes a 7B or 14B
target, and how it compares with llama.cpp there, depends on the shapes and the block types,
not on what the weights say. Random weights of the real shapes need no download and no
float copy: each quantized tensor is written directly as random blocks.

What a file holds (llama.cpp's Q4_K_M rules, src/llama-quant.cpp):
  - every decoder Linear as Q4_K blocks, except attn_v and ffn_down of the layers that
    llama.cpp's use_more_bits picks (14 of 28, 18 of 36, 24 of 48), which are Q6_K;
  - the output head as Q6_K and the token embedding as Q4_K for the untied sizes (7B, 14B);
    the tied sizes (1.5B, 3B) have no output tensor and their token embedding is Q6_K, as
    llama.cpp quantizes a tied embedding with the head's type (--untie writes a Q6_K head
    and a Q4_K embedding for them too, as the default target's own Coder 1.5B file has);
  - norms (ones) and q, k, v biases (normal, std --std) as F32.
Random blocks: uniform nibbles (Q4_K) and 6-bit values (Q6_K), sub-block scales drawn from a
narrow range, Q4_K's mins set so each sub-block's mean is about 0, and float16 d (and dmin)
per super-block chosen so the weights' std is about --std (0.02): the model runs without
NaN or inf and its greedy tokens vary, but it means nothing.

Metadata: the qwen2 keys the default target's GGUF has (context length, block count, widths,
heads, rope theta, norm epsilon, file type 15 = Q4_K_M), set to each size's values, and that
file's tokenizer keys (tokenizer.ggml.*, its chat template) copied as they are, so
transformers builds a config and a tokenizer from the file. Every size takes the 1.5B's
vocabulary (151936 tokens); the real 7B and 14B pad theirs to 152064 rows, 0.1% more.
The source is --source, or the default target's GGUF assembled into --out from its installed
packages once.

    python dev/scale_models.py [--sizes 1.5b,3b,7b,14b] [--out /work/scale-models]
        [--source GGUF] [--untie] [--std 0.02] [--seed 0] [--safetensors]

--safetensors writes bf16 checkpoint folders instead (config.json, 2 GB shards, their index
and the same tokenizer), random normal weights: the input of specbench's safetensors path.

Writes OUT/qwen2.5-SIZE-random-q4_k_m.gguf (SIZE-untied with --untie), about 1.1, 2.0, 4.7
and 9.0 GB; run it under `nice -n 19` on a shared machine. Memory: the largest single tensor
(the 14B head, 0.6 GB).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
from kernel_shapes import more_bits
from shapes import SHAPES, Shape

from specbench.models import defaults
from specbench.speed.gguf_blocks import (
    BLOCK_BYTES as Q4K_BYTES,
)
from specbench.speed.gguf_blocks import (
    Q6K_BLOCK_BYTES as Q6K_BYTES,
)
from specbench.speed.gguf_blocks import (
    QK,
    random_q4k,
    random_q6k,
)

Q4K, Q6K, F32 = GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K, GGMLQuantizationType.F32


def file_name(shape: Shape, untie: bool = False) -> str:
    untied = "-untied" if untie and shape.tie_word_embeddings else ""
    return f"qwen2.5-{shape.name}{untied}-random-q4_k_m.gguf"


# ---------------------------------------------------------------------------- the file


@dataclass(frozen=True)
class Tensor:
    name: str
    kind: GGMLQuantizationType
    shape: tuple[int, ...]  # PyTorch's order: (rows, columns) or (n,)

    @property
    def nbytes(self) -> int:
        if self.kind == F32:
            return 4 * int(np.prod(self.shape))
        rows, cols = self.shape
        return rows * cols // QK * (Q4K_BYTES if self.kind == Q4K else Q6K_BYTES)

    def data(self, rng: np.random.Generator, std: float) -> np.ndarray:
        """Random contents (ones for a norm), as GGUFWriter takes them (quantized: bytes)."""
        if self.kind == F32:
            if self.name.endswith("norm.weight"):
                return np.ones(self.shape, dtype=np.float32)
            return (std * rng.standard_normal(self.shape)).astype(np.float32)
        rows, cols = self.shape
        return (random_q4k if self.kind == Q4K else random_q6k)(rows, cols, rng, std)


def tensor_plan(shape: Shape, vocab: int, untie: bool = False) -> list[Tensor]:
    """Every tensor of the file, in llama.cpp's converter's order, with its Q4_K_M type."""
    h, ff, kv, n = shape.hidden_size, shape.intermediate_size, shape.kv_width, shape.num_hidden_layers
    for width in (h, ff):
        if width % QK:
            raise ValueError(f"{shape.name}: width {width} is not a multiple of {QK}, which Q4_K needs")
    head = not shape.tie_word_embeddings or untie
    plan = [Tensor("token_embd.weight", Q4K if head else Q6K, (vocab, h))]
    for i in range(n):
        more = Q6K if more_bits(i, n) else Q4K
        plan += [
            Tensor(f"blk.{i}.attn_norm.weight", F32, (h,)),
            Tensor(f"blk.{i}.attn_q.weight", Q4K, (h, h)),
            Tensor(f"blk.{i}.attn_q.bias", F32, (h,)),
            Tensor(f"blk.{i}.attn_k.weight", Q4K, (kv, h)),
            Tensor(f"blk.{i}.attn_k.bias", F32, (kv,)),
            Tensor(f"blk.{i}.attn_v.weight", more, (kv, h)),
            Tensor(f"blk.{i}.attn_v.bias", F32, (kv,)),
            Tensor(f"blk.{i}.attn_output.weight", Q4K, (h, h)),
            Tensor(f"blk.{i}.ffn_norm.weight", F32, (h,)),
            Tensor(f"blk.{i}.ffn_gate.weight", Q4K, (ff, h)),
            Tensor(f"blk.{i}.ffn_up.weight", Q4K, (ff, h)),
            Tensor(f"blk.{i}.ffn_down.weight", more, (h, ff)),
        ]
    plan.append(Tensor("output_norm.weight", F32, (h,)))
    if head:
        plan.append(Tensor("output.weight", Q6K, (vocab, h)))
    return plan


def tokenizer_fields(source: Path) -> list[tuple[str, object, GGUFValueType, GGUFValueType | None]]:
    """A GGUF's tokenizer keys (tokenizer.ggml.*, tokenizer.chat_template) as
    (key, value, type, array item type), to write into another file unchanged."""
    reader = GGUFReader(str(source))
    fields = []
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            kind = field.types[0]
            fields.append((key, field.contents(), kind, field.types[1] if kind == GGUFValueType.ARRAY else None))
    if not any(key == "tokenizer.ggml.tokens" for key, *_ in fields):
        raise ValueError(f"{source} has no tokenizer.ggml.tokens")
    return fields


def vocab_size(fields) -> int:
    return next(len(value) for key, value, *_ in fields if key == "tokenizer.ggml.tokens")


def write_model(
    path: Path, shape: Shape, tokenizer: list, *, untie: bool = False, std: float = 0.02, seed: int = 0
) -> Path:
    """Write `shape` as a random-weight Q4_K_M-like GGUF at `path` with `tokenizer`'s keys
    (tokenizer_fields), one tensor in memory at a time; returns the path."""
    plan = tensor_plan(shape, vocab_size(tokenizer), untie)
    partial = path.with_name(path.name + ".partial")
    writer = GGUFWriter(str(partial), "qwen2")
    writer.add_type("model")
    writer.add_name(f"Qwen2.5 {shape.name.upper()} shapes, random weights (specbench scale benchmark)")
    writer.add_size_label(shape.name.upper())
    writer.add_context_length(shape.max_position_embeddings)
    writer.add_block_count(shape.num_hidden_layers)
    writer.add_embedding_length(shape.hidden_size)
    writer.add_feed_forward_length(shape.intermediate_size)
    writer.add_head_count(shape.num_attention_heads)
    writer.add_head_count_kv(shape.num_key_value_heads)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(shape.rms_norm_eps)
    writer.add_file_type(LlamaFileType.MOSTLY_Q4_K_M)
    for key, value, kind, item in tokenizer:
        writer.add_key_value(key, value, kind, sub_type=item)
    writer.add_quantization_version(2)
    for tensor in plan:
        if tensor.kind == F32:
            writer.add_tensor_info(tensor.name, tensor.shape, np.dtype(np.float32), tensor.nbytes)
        else:  # the byte shape; the writer turns it into the value shape
            rows, cols = tensor.shape
            writer.add_tensor_info(
                tensor.name, (rows, tensor.nbytes // rows), np.dtype(np.uint8), tensor.nbytes, raw_dtype=tensor.kind
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for n, tensor in enumerate(plan):
        writer.write_tensor_data(tensor.data(np.random.default_rng([seed, n]), std))
    writer.close()
    partial.replace(path)
    return path


def write_safetensors(
    folder: Path, shape: Shape, source: Path, *, std: float = 0.02, seed: int = 0, shard_gb: float = 2.0
) -> Path:
    """Write `shape` as a random-weight bf16 checkpoint folder, as save_pretrained lays one out
    (config.json, shards of about shard_gb, model.safetensors.index.json) with the tokenizer
    of the GGUF `source`: the HF path's input at that size. One tensor in memory at a time."""
    import json

    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, Qwen2Config

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        tie_word_embeddings=shape.tie_word_embeddings,
        rope_theta=shape.rope_theta,
        rms_norm_eps=shape.rms_norm_eps,
        max_position_embeddings=shape.max_position_embeddings,
        eos_token_id=tokenizer.eos_token_id,
        dtype="bfloat16",
    )
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    generator = torch.Generator().manual_seed(seed)
    shards, shard, size = [], {}, 0

    def flush() -> None:
        nonlocal shard, size
        if shard:
            name = f"model-{len(shards) + 1:05d}.safetensors"
            save_file(shard, str(folder / name), metadata={"format": "pt"})
            shards.append((name, list(shard)))
            shard, size = {}, 0

    for name, shape_ in _hf_tensor_shapes(config):
        value = torch.ones(shape_) if name.endswith("norm.weight") else torch.randn(shape_, generator=generator) * std
        shard[name] = value.to(torch.bfloat16)
        size += value.numel() * 2
        if size >= shard_gb * 1e9:
            flush()
    flush()
    weight_map = {tensor: name for name, tensors in shards for tensor in tensors}
    index = {"metadata": {"total_size": sum((folder / n).stat().st_size for n, _ in shards)}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
    return folder


def _hf_tensor_shapes(config) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor a Qwen2 checkpoint of config holds (meta device: no memory)."""
    import torch
    from transformers import Qwen2ForCausalLM

    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    return [
        (name, tuple(tensor.shape))
        for name, tensor in model.state_dict().items()
        if not (config.tie_word_embeddings and name == "lm_head.weight")
    ]


def source_gguf(folder: Path) -> Path:
    """The default target's GGUF (its tokenizer is every size's), assembled once into `folder`."""
    path = folder / defaults.TARGET.gguf_name
    if not path.exists():
        defaults.assemble(defaults.TARGET, path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes",
        default="1.5b,3b,7b,14b",
        help=f"comma-separated, of {', '.join(SHAPES)} (tiny: 2 layers, hidden 256, for dry runs)",
    )
    parser.add_argument("--out", type=Path, default=Path("/work/scale-models"))
    parser.add_argument(
        "--source",
        type=Path,
        help="a GGUF whose tokenizer keys to copy (default: the default target's, assembled into --out)",
    )
    parser.add_argument(
        "--untie", action="store_true", help="a Q6_K output head for the tied sizes too (as the Coder 1.5B file has)"
    )
    parser.add_argument("--std", type=float, default=0.02, help="the weights' standard deviation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--safetensors",
        action="store_true",
        help="write bf16 checkpoint folders (qwen2.5-SIZE-random-bf16/) instead of GGUFs: the HF path",
    )
    args = parser.parse_args()
    sizes = [s.strip().lower() for s in args.sizes.split(",") if s.strip()]
    if unknown := [s for s in sizes if s not in SHAPES]:
        parser.error(f"unknown sizes {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizer_fields(args.source or source_gguf(args.out))
    for size in sizes:
        shape = SHAPES[size]
        start = time.perf_counter()
        if args.safetensors:
            folder = write_safetensors(
                args.out / f"qwen2.5-{shape.name}-random-bf16",
                shape,
                args.source or source_gguf(args.out),
                std=args.std,
                seed=args.seed,
            )
            print(
                f"{folder}: {sum(f.stat().st_size for f in folder.iterdir()) / 1e9:.2f} GB "
                f"in {time.perf_counter() - start:.0f} s",
                flush=True,
            )
            continue
        path = write_model(
            args.out / file_name(shape, args.untie), shape, tokenizer, untie=args.untie, std=args.std, seed=args.seed
        )
        print(f"{path}: {path.stat().st_size / 1e9:.2f} GB in {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
