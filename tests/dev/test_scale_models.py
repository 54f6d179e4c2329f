"""dev/scale_models.py on a tiny shape: the random Q4_K_M-like GGUF it writes has the
declared tensor types and shapes, weights of the asked std, and a config, tokenizer and
model that transformers builds from it (no real model: the tokenizer is tiny_hf's)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFReader, dequantize

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev"))
import scale_models  # noqa: E402
from tiny_hf import write_tiny_gguf  # noqa: E402

from specbench.speed import gguf_blocks  # noqa: E402
from specbench.speed.gguf_blocks import dequantize as specbench_dequantize  # noqa: E402
from specbench.speed.gguf_blocks import dequantize_q6k, repack, repack_q6k

pytestmark = pytest.mark.usefixtures("single_thread")

# 4 layers: llama.cpp's use_more_bits keeps layers 2 and 3's attn_v and ffn_down in Q6_K
TINY = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return scale_models.tokenizer_fields(write_tiny_gguf(tmp_path_factory.mktemp("source") / "source.gguf"))


def test_random_blocks_have_the_asked_std_and_read_the_same_in_specbench():
    rng = np.random.default_rng(0)
    q4k, q6k = gguf_blocks.random_q4k(64, 512, rng, 0.02), gguf_blocks.random_q6k(64, 512, rng, 0.02)
    w4, w6 = dequantize(q4k, GGMLQuantizationType.Q4_K), dequantize(q6k, GGMLQuantizationType.Q6_K)
    for w in (w4, w6):
        assert w.shape == (64, 512) and np.isfinite(w).all()
        assert abs(w.std() - 0.02) < 0.002 and abs(w.mean()) < 0.002
    # the packed 6-bit scales and mins mean what specbench's reader takes them to mean
    assert np.array_equal(specbench_dequantize(**repack(q4k)).numpy(), w4)
    assert np.array_equal(dequantize_q6k(**repack_q6k(q6k)).numpy(), w6)


@pytest.mark.parametrize("tied", [True, False])
def test_tiny_file_has_the_declared_tensors_and_loads_in_transformers(tmp_path, tokenizer, tied):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    shape = scale_models.Shape("tiny", **TINY, tie_word_embeddings=tied)
    path = scale_models.write_model(tmp_path / scale_models.file_name(shape), shape, tokenizer)
    vocab = scale_models.vocab_size(tokenizer)

    plan = {t.name: t for t in scale_models.tensor_plan(shape, vocab)}
    tensors = {t.name: t for t in GGUFReader(str(path)).tensors}
    assert tensors.keys() == plan.keys()
    assert ("output.weight" in tensors) is not tied
    assert tensors["token_embd.weight"].tensor_type == (
        GGMLQuantizationType.Q6_K if tied else GGMLQuantizationType.Q4_K
    )
    for name, tensor in tensors.items():
        assert tensor.tensor_type == plan[name].kind, name
        assert tuple(int(n) for n in reversed(tensor.shape)) == plan[name].shape, name
    six = {
        name for name, t in tensors.items() if t.tensor_type == GGMLQuantizationType.Q6_K and name.startswith("blk.")
    }
    assert six == {f"blk.{i}.{n}.weight" for i in (2, 3) for n in ("attn_v", "ffn_down")}

    config = AutoConfig.from_pretrained(tmp_path, gguf_file=path.name)
    assert {key: getattr(config, key) for key in TINY} == TINY
    assert (config.vocab_size, config.tie_word_embeddings, config.max_position_embeddings) == (vocab, tied, 32768)
    assert config.rope_parameters["rope_theta"] == 1e6

    model = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, dtype=torch.float32).eval()
    ids = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)("hello world", return_tensors="pt").input_ids
    with torch.inference_mode():
        logits = model(ids).logits
    assert torch.isfinite(logits).all() and logits.std() > 0.05
    assert abs(model.model.layers[0].mlp.up_proj.weight.std().item() - 0.02) < 0.002


@pytest.mark.needs_kernel("linear")
def test_the_safetensors_folder_loads_as_an_int8_target_through_the_builder(tmp_path, monkeypatch):
    """--safetensors: a bf16 checkpoint folder (shards and their index, the source's
    tokenizer) that specbench builds layer by layer into an int8 target."""
    from specbench.models.model import load_model
    from specbench.models.specs import ModelSpec

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    source = write_tiny_gguf(tmp_path / "source.gguf")
    shape = scale_models.Shape("tiny", **TINY, tie_word_embeddings=False)
    folder = scale_models.write_safetensors(tmp_path / "tiny-bf16", shape, source, shard_gb=0.001)
    assert len(list(folder.glob("model-*.safetensors"))) > 1 and (folder / "model.safetensors.index.json").is_file()
    loaded = load_model(ModelSpec("dir", str(folder)), role="target", dtype="int8")
    with torch.inference_mode():
        logits = loaded.model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, loaded.model.config.vocab_size) and torch.isfinite(logits).all()
    assert loaded.tokenizer is not None
