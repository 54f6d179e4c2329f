"""Every quantized model built one tensor at a time (models/build.py) and prepared once
(models/prepare.py): the same layers and logits as the two-step path (load dense, then swap
or quantize), greedy parity on the result, a changed source prepared again, and bad input
in one line."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from conftest import accepted_with_greedy_parity, as_cpu_target, noisy_copy, tiny_model
from gguf_tiny import HIDDEN, q4k_weights, quantize_to_q4k, use_gguf_blocks
from tiny_hf import load_tiny, save_tiny, write_tiny_gguf

from specbench.errors import ModelError
from specbench.models import prepare
from specbench.models.build import HEAD_Q4K_ROWS
from specbench.models.model import load_model
from specbench.models.specs import ModelSpec
from specbench.speed.gguf_blocks import Q4KLinear, Q6KLinear, quantize_q4k
from specbench.speed.quantize import Int8Linear, Int8TargetLinear, quantize_linears, quantize_target
from specbench.speed.row_embedding import RowEmbedding

pytestmark = pytest.mark.needs_kernel("q4k", "linear")

IDS = torch.tensor([[1, 5, 9, 12, 3, 40, 63, 0]])
# GGUF tensors written in other block types than Q4_K / Q6_K: what real Q4_K_M files mix in
OTHER_TYPES = {
    "blk.1.ffn_up.weight": "Q8_0",
    "blk.1.attn_k.weight": "Q5_0",
    "blk.0.attn_output.weight": "F16",
    "token_embd.weight": "Q8_0",
}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))


def mixed_gguf(path, seed: int = 0):
    """A tiny Qwen2 (hidden 256) as a complete GGUF whose weights are Q4_K, Q6_K, Q8_0, Q5_0
    and F16 tensors (norms and biases float32)."""
    import gguf

    model = tiny_model(seed, hidden=HIDDEN)
    raw = {}
    for name, (_, blocks, six) in q4k_weights(model, seed, ("blk.0.ffn_down", "output")).items():
        raw[name] = (gguf.GGMLQuantizationType.Q6_K if six else gguf.GGMLQuantizationType.Q4_K, blocks)
    tensors = dict(model.state_dict())
    hf_names = {
        "blk.1.ffn_up.weight": "model.layers.1.mlp.up_proj.weight",
        "blk.1.attn_k.weight": "model.layers.1.self_attn.k_proj.weight",
        "blk.0.attn_output.weight": "model.layers.0.self_attn.o_proj.weight",
        "token_embd.weight": "model.embed_tokens.weight",
    }
    for name, kind in OTHER_TYPES.items():
        qtype = gguf.GGMLQuantizationType[kind]
        raw[name] = (qtype, gguf.quants.quantize(tensors[hf_names[name]].numpy(), qtype))
    return write_tiny_gguf(path, model, raw=raw)


def two_step_target(path):
    """The reference: transformers loads the GGUF dense in float32, then the file's Q4_K and
    Q6_K blocks are swapped in and every other Linear becomes int8."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    use_gguf_blocks(model, str(path))
    quantize_target(model)
    return model


def same_layers(built, reference) -> None:
    """Every Linear of the same kind with the same buffers; the embedding's rows equal."""
    layers = (Q4KLinear, Q6KLinear, Int8TargetLinear, Int8Linear)
    found = {n: m for n, m in built.named_modules() if isinstance(m, layers)}
    expected = {n: m for n, m in reference.named_modules() if isinstance(m, layers)}
    assert {n: type(m) for n, m in found.items()} == {n: type(m) for n, m in expected.items()}
    for name, module in found.items():
        mine, theirs = dict(module.named_buffers()), dict(expected[name].named_buffers())
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine), name
    every = torch.arange(built.config.vocab_size)
    assert torch.equal(built.get_input_embeddings()(every), reference.get_input_embeddings()(every))


@torch.inference_mode()
def test_a_gguf_of_mixed_block_types_builds_to_the_two_step_path_s_layers_and_logits(tmp_path):
    path = mixed_gguf(tmp_path / "mixed.gguf")
    loaded = load_model(ModelSpec("gguf", str(path)), role="target", dtype="q4k")
    reference = two_step_target(path)
    assert isinstance(loaded.model.get_input_embeddings(), RowEmbedding)  # the Q8_0 table stays Q8_0
    assert sum(isinstance(m, Q6KLinear) for m in loaded.model.modules()) == 2
    assert sum(isinstance(m, Int8TargetLinear) for m in loaded.model.modules()) == 3  # Q8_0, Q5_0, F16
    same_layers(loaded.model, reference)
    assert torch.equal(loaded.model(input_ids=IDS).logits, reference(input_ids=IDS).logits)


@torch.inference_mode()
def test_greedy_speculative_decoding_on_a_built_target_equals_its_plain_decoding(tmp_path):
    path = mixed_gguf(tmp_path / "mixed.gguf")
    target = load_model(ModelSpec("gguf", str(path)), role="target", dtype="q4k").model
    from transformers import AutoModelForCausalLM

    dense = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name, dtype=torch.float32).eval()
    assert accepted_with_greedy_parity(target, noisy_copy(dense, 0.1, seed=3), gamma=3) > 0


@torch.inference_mode()
def test_a_safetensors_model_builds_layer_by_layer_to_the_dense_path_then_quantized(tmp_path):
    folder = save_tiny(tmp_path / "tiny", hidden=HIDDEN)
    spec = ModelSpec("dir", str(folder))
    target = load_model(spec, role="target", dtype="int8").model
    reference = load_tiny(folder)
    quantize_target(reference)
    same_layers(target, as_cpu_target(reference))
    assert torch.equal(target(input_ids=IDS).logits, reference(input_ids=IDS).logits)

    drafter = load_model(spec, role="drafter", dtype="q4k", require_tokenizer=False).model
    from transformers import AutoModelForCausalLM

    dense = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    quantize_to_q4k(dense)
    head_weight = dense.get_output_embeddings().weight.detach().clone()
    quantize_linears(dense)
    dense.get_output_embeddings().hold_q4k_rows(quantize_q4k(head_weight[:HEAD_Q4K_ROWS]))  # as build.py does
    same_layers(drafter, dense)
    assert torch.equal(drafter(input_ids=IDS).logits, dense(input_ids=IDS).logits)


@torch.inference_mode()
def test_a_bf16_checkpoint_keeps_its_embedding_rows_in_bf16(tmp_path):
    folder = tmp_path / "bf16"
    tiny_model(0, hidden=HIDDEN).to(torch.bfloat16).save_pretrained(folder)
    target = load_model(ModelSpec("dir", str(folder)), role="target", dtype="int8", require_tokenizer=False).model
    embedding = target.get_input_embeddings()
    assert embedding.rows.shape == (64, HIDDEN * 2) and embedding.out_dtype == torch.float32
    reference = load_tiny(folder)
    assert torch.equal(embedding(IDS), reference.get_input_embeddings()(IDS))


@torch.inference_mode()
def test_a_user_gguf_is_prepared_once_and_again_when_the_file_changes(tmp_path, monkeypatch):
    path = mixed_gguf(tmp_path / "user.gguf")
    spec = ModelSpec("gguf", str(path))
    first = load_model(spec, role="target", dtype="q4k")
    folder = prepare.cache_folder(spec, path)
    kept = [
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        prepare.SOURCE_FILE,
        prepare.prepared_path(folder, "target", "q4k").name,
    ]
    assert sorted(p.name for p in folder.iterdir() if p.suffix in (".safetensors", ".json", ".txt")) == sorted(kept)
    built = prepare._prepare
    monkeypatch.setattr(prepare, "_prepare", lambda *a: pytest.fail("a prepared model must be mapped, not built again"))
    again = load_model(spec, role="target", dtype="q4k")
    assert torch.equal(again.model(input_ids=IDS).logits, first.model(input_ids=IDS).logits)

    mixed_gguf(path, seed=1)  # the same name, other weights
    os.utime(path, ns=(1, 1))  # even with the old time, the header's hash or the size tells
    monkeypatch.setattr(prepare, "_prepare", built)
    changed = load_model(ModelSpec("gguf", str(path)), role="target", dtype="q4k")
    assert prepare.cache_folder(spec, path) != folder and not folder.exists()  # the old version's copy is gone
    assert not torch.equal(changed.model(input_ids=IDS).logits, first.model(input_ids=IDS).logits)


def test_bad_sources_get_one_line(tmp_path):
    import gguf

    model = tiny_model(0, hidden=HIDDEN)
    path = write_tiny_gguf(tmp_path / "good.gguf", model)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size - 4096])
    with pytest.raises(ModelError, match="cannot load target cut.gguf") as error:
        load_model(ModelSpec("gguf", str(cut)), role="target", dtype="int8")
    assert "\n" not in str(error.value)

    odd = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(odd), "nonesuch")
    writer.add_tensor("token_embd.weight", np.zeros((64, 32), np.float32))
    writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
    with pytest.raises(ModelError, match="nonesuch") as error:
        load_model(ModelSpec("gguf", str(odd)), role="target", dtype="int8")
    assert "\n" not in str(error.value)

    q81 = gguf.GGMLQuantizationType.Q8_1  # a block type gguf-py cannot dequantize
    blocks = np.zeros((model.config.intermediate_size, HIDDEN // 32 * 40), np.uint8)
    unread = write_tiny_gguf(tmp_path / "q81.gguf", model, raw={"blk.0.ffn_up.weight": (q81, blocks)})
    with pytest.raises(ModelError, match=r"blk.0.ffn_up.weight is Q8_1.*re-quantize") as error:
        load_model(ModelSpec("gguf", str(unread)), role="target", dtype="int8")
    assert "\n" not in str(error.value)


def test_q4k_for_a_gguf_without_q4k_layers_is_refused_before_building(tmp_path):
    path = write_tiny_gguf(tmp_path / "f32.gguf", tiny_model(0, hidden=HIDDEN))
    with pytest.raises(ModelError, match="no layer of f32.gguf is stored as Q4_K"):
        load_model(ModelSpec("gguf", str(path)), role="target", dtype="q4k")
    assert not (tmp_path / "cache" / "models").exists()


@torch.inference_mode()
def test_random_weights_build_a_q4k_target_as_a_q4k_m_file_lays_it_out(tmp_path):
    """`costs --random-weights`: the config's shapes, Q4_K layers and a Q6_K head drawn one
    tensor at a time, no weights read, and a forward that gives finite logits."""
    folder = tmp_path / "config-only"
    tiny_model(0, hidden=HIDDEN).config.save_pretrained(folder)
    loaded = load_model(ModelSpec("dir", str(folder)), role="target", dtype="q4k", random_weights=True)
    model = loaded.model
    assert loaded.tokenizer is None
    assert sum(isinstance(m, Q4KLinear) for m in model.modules()) == 2 * 7 and isinstance(model.lm_head, Q6KLinear)
    assert isinstance(model.get_input_embeddings(), RowEmbedding) and model.get_input_embeddings().qtype == 12
    assert torch.isfinite(model(input_ids=IDS).logits).all()
    drafter = load_model(ModelSpec("dir", str(folder)), role="drafter", dtype="q4k", random_weights=True).model
    assert isinstance(drafter.lm_head, Int8Linear) and torch.isfinite(drafter(input_ids=IDS).logits.float()).all()


def tied_model(seed: int = 0):
    from transformers import Qwen2ForCausalLM

    config = tiny_model(seed, hidden=HIDDEN).config
    config.tie_word_embeddings = True
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).eval()


@torch.inference_mode()
def test_a_tied_head_is_built_from_the_embedding_as_the_dense_path_builds_it(tmp_path):
    """A GGUF without output.weight (llama.cpp's tied head) and a checkpoint saved tied: the
    head is the embedding's table, int8 in a target and in a drafter, as the dense path made it."""
    model = tied_model()
    path = write_tiny_gguf(tmp_path / "tied.gguf", model, skip=("output.weight",))
    built = load_model(ModelSpec("gguf", str(path)), role="target", dtype="int8").model
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name, dtype=torch.float32).eval()
    assert reference.config.tie_word_embeddings
    quantize_target(reference)
    same_layers(built, as_cpu_target(reference))
    assert isinstance(built.lm_head, Int8TargetLinear)
    assert torch.equal(built(input_ids=IDS).logits, reference(input_ids=IDS).logits)

    model.save_pretrained(tmp_path / "saved")
    drafter = load_model(
        ModelSpec("dir", str(tmp_path / "saved")), role="drafter", dtype="q4k", require_tokenizer=False
    ).model
    dense = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.bfloat16).eval()
    quantize_to_q4k(dense)
    head_weight = dense.get_output_embeddings().weight.detach().clone()
    quantize_linears(dense)
    dense.get_output_embeddings().hold_q4k_rows(quantize_q4k(head_weight[:HEAD_Q4K_ROWS]))  # as build.py does
    same_layers(drafter, dense)
    assert torch.equal(drafter(input_ids=IDS).logits, dense(input_ids=IDS).logits)
