"""A prepared q4k target (models/prepared.py): saved once, mapped back with every layer and
every logit as it was, and not used when the file is from another format, holds Q4_K
nibbles in another order than this build reads, or is damaged."""

from __future__ import annotations

import pytest
import torch
from gguf_tiny import Q4_K_M_LIKE, q4k_model_and_file, use_gguf_blocks

from specbench.models import prepared
from specbench.models.prepared import load_prepared, prepared_path, save_prepared
from specbench.speed import native
from specbench.speed.gguf_blocks import Q4KLinear, Q6KLinear
from specbench.speed.quantize import Int8TargetLinear, quantize_target

pytestmark = pytest.mark.needs_kernel("q4k", "linear")


def prepared_tiny(tmp_path):
    """A tiny q4k target (three layers Q6_K, one left int8) saved as a prepared file beside its config."""
    model, gguf = q4k_model_and_file(tmp_path, skip="blk.1.ffn_up", q6k=Q4_K_M_LIKE)
    use_gguf_blocks(model, str(gguf))
    quantize_target(model)
    folder = tmp_path / "model"
    model.config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    path = prepared_path(folder, "target", "q4k")
    save_prepared(model, path)
    return model, folder, path


@torch.inference_mode()
def test_a_prepared_target_loads_back_with_the_same_layers_and_logits(tmp_path):
    model, folder, path = prepared_tiny(tmp_path)
    loaded = load_prepared(str(folder), path)
    assert loaded is not None
    kinds = lambda m: [
        (name, type(module).__name__)
        for name, module in m.named_modules()
        if isinstance(module, (Q4KLinear, Q6KLinear, Int8TargetLinear, torch.nn.Linear))
    ]
    assert kinds(loaded) == kinds(model)
    assert sum(isinstance(m, Int8TargetLinear) for m in loaded.modules()) == 1
    assert sum(isinstance(m, Q6KLinear) for m in loaded.modules()) == len(Q4_K_M_LIKE)
    ids = torch.tensor([[1, 5, 9, 12, 3, 40]])
    assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    assert not any(t.is_meta for t in [*loaded.parameters(), *loaded.buffers()])


def test_a_prepared_file_of_another_format_or_damaged_is_not_used(tmp_path, monkeypatch):
    _, folder, path = prepared_tiny(tmp_path)
    monkeypatch.setattr(prepared, "PREPARED_FORMAT", prepared.PREPARED_FORMAT + 1)
    assert load_prepared(str(folder), path) is None
    monkeypatch.undo()
    path.write_bytes(path.read_bytes()[:100])
    assert load_prepared(str(folder), path) is None
    assert load_prepared(str(folder), folder / "missing.safetensors") is None


def test_a_prepared_file_with_q6k_values_in_another_order_is_not_used(tmp_path, monkeypatch):
    """A file saved by a build that reads Q6_K values in the other order (q6k_linear.c: a
    build for AVX2 alone reads lane order) is rebuilt, not run with the wrong products."""
    _, folder, path = prepared_tiny(tmp_path)
    assert load_prepared(str(folder), path) is not None
    monkeypatch.setattr(native, "lane_order", lambda: not native.q4k_kernel().specbench_lane_order())
    assert load_prepared(str(folder), path) is None


def test_each_block_order_keeps_its_own_prepared_file(tmp_path, monkeypatch):
    """Switching between builds of both orders maps each build's own file, never the other's."""
    monkeypatch.setattr(native, "lane_order", lambda: False)
    file_order = prepared_path(tmp_path, "target", "q4k")
    monkeypatch.setattr(native, "lane_order", lambda: True)
    lanes = prepared_path(tmp_path, "target", "q4k")
    assert (file_order.name, lanes.name) == ("target-q4k.safetensors", "target-q4k-lanes.safetensors")
