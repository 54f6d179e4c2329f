"""The q4k target (`--dtype q4k`: gguf_blocks.Q4KLinear and Q6KLinear over a GGUF file's
Q4_K and Q6_K blocks).

What must hold, for both kinds of block: the blocks are repacked without changing a value
(they dequantize as gguf-py does), the kernel equals a PyTorch reference of its contract bit
for bit (so a row's result cannot depend on the other rows, the tile or the threads), the
layers are found in a GGUF file by name and checked against the loaded weights, and a
target built of them (every Linear Q4_K, or some Q6_K as in a Q4_K_M file) verifies k
tokens with exactly the logits of k one-token steps, so greedy speculative decoding equals
its plain decoding; sampled with a q4k drafter, its output follows its own distribution
(chi-square). The tests skip where the AVX2 kernel is not built.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from chi_square import speculative_pvalues
from conftest import accepted_with_greedy_parity, as_cpu_target, block_and_steps, noisy_copy
from gguf_tiny import (
    Q4_K_M_LIKE,
    q4k_gguf_with_tokenizer,
    q4k_model_and_file,
    q4k_target,
    q6k_reference,
    quantize_to_q4k,
    random_q4k,
    random_q6k,
    use_gguf_blocks,
)
from gguf_tiny import (
    q4k_reference as reference,
)
from tiny_hf import save_tiny

from specbench.core.sampling import SamplingConfig
from specbench.errors import ModelError
from specbench.models.dtypes import parse_draft_dtype, parse_target_dtype
from specbench.models.model import load_model
from specbench.models.specs import parse_model_spec
from specbench.speed import gguf_blocks, native
from specbench.speed.gguf_blocks import QK, Q4KLinear, Q6KLinear, dequantize, dequantize_q6k, repack, repack_q6k
from specbench.speed.gguf_file import Q4_K, read_tensor_index

needs_kernel = pytest.mark.needs_kernel("q4k")
needs_q6k = pytest.mark.needs_kernel("q6k")
LAYOUTS = {"every Linear Q4_K": (), "Q4_K_M (some Q6_K)": Q4_K_M_LIKE}

# each kind of block: (random file bytes, their layer, the kernel's reference, the dense weight)
KINDS = {
    "Q4_K": (
        random_q4k,
        lambda raw, b: Q4KLinear(repack(raw), b),
        reference,
        lambda layer: layer.dense(),
    ),
    "Q6_K": (
        random_q6k,
        lambda raw, b: Q6KLinear(repack_q6k(raw), b),
        q6k_reference,
        lambda layer: layer.dense(),
    ),
}
EACH_KIND = [
    pytest.param("Q4_K", marks=needs_kernel),
    pytest.param("Q6_K", marks=needs_q6k),
]  # each skipped where its own kernel is not built


def layer_of(kind: str, rows: int, cols: int, seed: int, bias: bool = False):
    random_blocks, make = KINDS[kind][:2]
    b = torch.randn(rows, generator=torch.Generator().manual_seed(seed)) if bias else None
    return make(random_blocks(rows, cols, seed), b)


def test_repacked_blocks_dequantize_as_gguf_py_does():
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as gguf_dequantize

    raw = random_q4k(6, 512, seed=1)
    expected = gguf_dequantize(raw, GGMLQuantizationType.Q4_K).reshape(6, 512)
    assert torch.equal(dequantize(**repack(raw)), torch.from_numpy(expected))
    raw = random_q6k(6, 512, seed=1)
    raw[0, 192:208] = np.array([-128, 127, 0, -1] * 4, dtype=np.int8).view(np.uint8)  # the Q6_K scales' extremes
    expected = gguf_dequantize(raw, GGMLQuantizationType.Q6_K).reshape(6, 512)
    assert torch.equal(dequantize_q6k(**repack_q6k(raw)), torch.from_numpy(expected))


@pytest.mark.parametrize("kind", EACH_KIND)
@pytest.mark.parametrize(
    "rows,cols,out",
    [
        (1, 256, 3),
        (2, 512, 8),
        (3, 256, 17),
        (4, 768, 5),
        (5, 256, 6),
        (7, 1536, 33),
        (8, 512, 7),
        (13, 256, 9),
        (20, 512, 4),
    ],
)
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_kernel_equals_its_reference_bit_for_bit(kind, rows, cols, out, with_bias):
    """Every tile height (1 to 4 rows, and to 8 on an AVX-512 build; more than 8 rows: the
    threaded quantizer)."""
    layer = layer_of(kind, out, cols, seed=rows * 10 + cols + out, bias=with_bias)
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows)) * 3
    x[0, :QK] = 0.0  # an all-zero super-block takes scale 1
    assert torch.equal(layer(x), KINDS[kind][2](x, layer))


@pytest.mark.parametrize("kind", EACH_KIND)
def test_the_reference_is_the_matrix_product_up_to_int8_activations(kind):
    layer = layer_of(kind, 40, 768, seed=3)
    x = torch.randn(5, 768, generator=torch.Generator().manual_seed(4))
    exact = x.double() @ KINDS[kind][3](layer).double().T
    assert ((layer(x).double() - exact).norm() / exact.norm()).item() < 0.02


@pytest.mark.parametrize("kind", EACH_KIND)
def test_a_row_gets_the_same_bits_alone_among_others_and_on_one_thread(kind):
    layer = layer_of(kind, 70, 512, seed=5)
    x = torch.randn(11, 512, generator=torch.Generator().manual_seed(6))
    x[3] *= 1e4  # a row with a much larger scale must not change the others
    together = layer(x)
    alone = torch.cat([layer(x[i : i + 1]) for i in range(11)])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one_thread = layer(x)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(together, alone) and torch.equal(together, one_thread)


@pytest.fixture
def avx2_build(monkeypatch, tmp_path):
    """The kernels built for AVX2 alone (SPECBENCH_MARCH=x86-64-v3: every AVX2 CPU's code),
    in a cache of their own; this CPU's build again afterwards."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setenv(native.MARCH_ENV, "x86-64-v3")
    native._load.cache_clear()
    try:
        yield tmp_path
    finally:
        monkeypatch.undo()
        native._load.cache_clear()


@pytest.mark.parametrize("kind", EACH_KIND)
def test_built_for_avx2_alone_the_kernel_equals_its_reference(kind, avx2_build):
    """Built for AVX2 alone, the kernels read Q4_K and Q6_K values in lane order
    (to_kernel_order, q6k_to_kernel_order); a layer made there still equals its kernel's
    reference bit for bit at every tile height, and its blocks still stand for the file's
    weights. On an AVX2 CPU this is also what the other tests run; on a VNNI CPU it is the
    only test of that build's code."""
    assert (native.q4k_why_not(), native.q6k_why_not()) == (None, None)
    assert native.why_not() == f"-march=x86-64-v3 lacks {native.GEMV.needs}"  # the build's target, not this CPU
    assert native.lane_order()
    layer = layer_of(kind, 37, 768, seed=8, bias=True)
    x = torch.randn(13, 768, generator=torch.Generator().manual_seed(9)) * 2
    x[1, :QK] = 0.0
    for rows in (1, 2, 3, 4, 5, 6, 13):
        assert torch.equal(
            layer(x[:rows]), reference(x[:rows], layer) if kind == "Q4_K" else q6k_reference(x[:rows], layer)
        )
    assert torch.equal(layer(x), torch.cat([layer(x[i : i + 1]) for i in range(13)]))
    assert (
        len(list((avx2_build / "native").glob(f"{kind.lower().replace('_', '')}_linear-*.so"))) == 1
    )  # that build ran
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as gguf_dequantize

    random_blocks, make, _, dense = KINDS[kind]
    raw = random_blocks(6, 512, seed=1)
    layer = make(raw, None)
    stored = layer.qs if kind == "Q4_K" else layer.ql
    assert not torch.equal(
        stored,
        torch.from_numpy(
            raw.reshape(6, 2, -1)[..., 16 : 16 + 128] if kind == "Q4_K" else raw.reshape(6, 2, -1)[..., :128]
        ),
    )  # reordered
    assert torch.equal(
        dense(layer), torch.from_numpy(gguf_dequantize(raw, getattr(GGMLQuantizationType, kind)).reshape(6, 512))
    )


@needs_kernel
@pytest.mark.parametrize("build", ["this CPU's", "AVX2 alone"])
def test_a_bfloat16_weight_has_the_bits_of_the_float32_one_rounded(build, request):
    """dense_bf16 (a drafter's twin, made in one pass by q4k_linear.c) is dense() rounded by
    PyTorch, bit for bit, in either build's nibble order and for a width short of its blocks."""
    if build == "AVX2 alone":
        request.getfixturevalue("avx2_build")
    assert native.q4k_kernel() is not None  # the one-pass path, not the fallback
    for cols, width, seed in ((768, 768, 3), (512, 300, 4)):
        layer = Q4KLinear(repack(random_q4k(11, cols, seed)), None, in_features=width)
        made = layer.dense_bf16()
        assert made.is_contiguous() and made.shape == (11, width) and made.dtype == torch.bfloat16
        assert torch.equal(made, layer.dense().to(torch.bfloat16))


@pytest.mark.parametrize("kind", EACH_KIND)
def test_the_two_builds_give_the_same_sums_and_refuse_each_others_q6k_layers(kind, monkeypatch, tmp_path):
    """Q4_K: both builds put the same exact integers in the same lanes (lane order: vpdpbusd
    where VNNI is built, vpmaddubsw and vpmaddwd for AVX2 alone), so a row gets the same bits
    from either, and a layer made under one runs under the other. Q6_K: a VNNI build sums in
    the file's order's lanes and one for AVX2 alone in lane order's, so floats that differ in
    the last bits at most (none where this CPU's build is itself lane order), and a layer
    made for one build's order refuses to run on the other's."""
    x = torch.randn(6, 768, generator=torch.Generator().manual_seed(9)) * 2
    here = layer_of(kind, 37, 768, seed=8, bias=True)
    native_out = [here(x[:rows]) for rows in range(1, 7)]
    same_order = kind == "Q4_K" or native.lane_order()
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setenv(native.MARCH_ENV, "x86-64-v3")
    native._load.cache_clear()
    try:
        avx2 = layer_of(kind, 37, 768, seed=8, bias=True)
        assert native.lane_order()  # the AVX2 build is the one loaded
        for rows in range(1, 7):
            got, want = avx2(x[:rows]), native_out[rows - 1]
            if same_order:
                assert torch.equal(got, want)
                assert torch.equal(here(x[:rows]), want)  # a layer made under one build runs under the other
            else:
                assert torch.allclose(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())
        if not same_order:
            with pytest.raises(RuntimeError, match="another order"):
                here(x[:1])
    finally:
        monkeypatch.undo()
        native._load.cache_clear()


# ---------------------------------------------------------------------------- a model from a GGUF file


def test_the_tensor_index_agrees_with_gguf_py(tmp_path):
    from gguf import GGUFReader

    _, path = q4k_model_and_file(tmp_path, skip="blk.0.ffn_up")
    index = read_tensor_index(str(path))
    theirs = GGUFReader(str(path))
    assert index.architecture == "qwen2"
    assert [(t.name, index.data_offset + t.offset, t.type) for t in index.tensors] == [
        (t.name, int(t.data_offset), int(t.tensor_type)) for t in theirs.tensors
    ]
    assert sum(t.type == Q4_K for t in index.tensors) == 2 * 7
    assert [t.name for t in index.tensors if t.type != Q4_K] == ["blk.0.ffn_up.weight"]


def test_one_reader_per_file_parses_a_gguf_once_within_the_block(tmp_path):
    import gguf

    from specbench.speed.gguf_file import one_reader_per_file

    _, path = q4k_model_and_file(tmp_path)
    original = gguf.GGUFReader
    with one_reader_per_file():
        first = gguf.GGUFReader(str(path))
        assert gguf.GGUFReader(str(tmp_path / "." / path.name)) is first  # the same file, another spelling
        assert len(first.tensors) == 2 * 7 + 1
    assert gguf.GGUFReader is original and gguf.GGUFReader(str(path)) is not first


def test_one_reader_per_file_needs_no_gguf_py_where_no_gguf_is_read(monkeypatch):
    """A machine without gguf-py (the GPU image has none) loads HF checkpoints all the same."""
    import sys

    from specbench.speed.gguf_file import one_reader_per_file

    monkeypatch.setitem(sys.modules, "gguf", None)  # makes `import gguf` raise ImportError
    entered = False
    with one_reader_per_file():
        entered = True
    assert entered


def test_the_fast_reader_builds_gguf_py_s_very_fields(tmp_path, monkeypatch):
    """fast_reader_class's arrays (the vocabulary's strings, token types, an empty array, an
    array of arrays) give the parts, indices and types gguf-py's own parser gives."""
    import gguf
    import numpy as np

    from specbench.speed.gguf_file import fast_reader_class

    _, path = q4k_gguf_with_tokenizer(tmp_path / "tok.gguf")
    writer = gguf.GGUFWriter(str(tmp_path / "arrays.gguf"), "qwen2")
    writer.add_array("test.empty", [])
    writer.add_array("test.floats", [0.5, -1.25, 3.0])
    writer.add_array("test.nested", [[1, 2], [3]])
    writer.add_array("test.words", ["a", "", "naïve"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    fast = fast_reader_class(gguf.GGUFReader)
    for file in (path, tmp_path / "arrays.gguf"):
        theirs, mine = gguf.GGUFReader(str(file)), fast(str(file))
        assert list(mine.fields) == list(theirs.fields)
        for name, field in theirs.fields.items():
            other = mine.fields[name]
            assert (other.offset, other.data, other.types) == (field.offset, field.data, field.types), name
            assert len(other.parts) == len(field.parts), name
            for a, b in zip(field.parts, other.parts):
                assert a.dtype == b.dtype and np.array_equal(a, b), name
        assert [t.name for t in mine.tensors] == [t.name for t in theirs.tensors]
    calls = []  # gguf-py's own parser, called per field and per array element
    own = gguf.GGUFReader._get_field_parts
    monkeypatch.setattr(
        gguf.GGUFReader, "_get_field_parts", lambda self, offs, kind: calls.append(kind) or own(self, offs, kind)
    )
    reader = fast(str(path))
    fast_calls, vocabulary = len(calls), len(reader.fields["tokenizer.ggml.tokens"].data)
    gguf.GGUFReader(str(path))
    assert fast_calls <= len(reader.fields)  # at most one a field: none per element
    assert len(calls) - fast_calls >= vocabulary >= 64  # gguf-py's: one per token at least


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"not a gguf file at all, not even close")
    with pytest.raises(ValueError, match="not a GGUF"):
        read_tensor_index(str(tmp_path / "x.gguf"))


@needs_kernel
def test_every_q4k_layer_is_found_by_name_and_a_layer_that_differs_is_left(tmp_path):
    model, path = q4k_model_and_file(tmp_path, skip="blk.1.attn_k")
    with torch.no_grad():  # a weight that is not what its blocks say is never swapped
        model.model.layers[0].mlp.up_proj.weight[0, 0] += 1.0
    swapped, left = use_gguf_blocks(model, str(path))
    assert (swapped, left) == (2 * 7 + 1 - 2, 2)
    assert isinstance(model.model.layers[0].mlp.up_proj, torch.nn.Linear)
    assert isinstance(model.model.layers[1].self_attn.k_proj, torch.nn.Linear)
    assert isinstance(model.model.layers[1].mlp.up_proj, Q4KLinear) and isinstance(model.lm_head, Q4KLinear)


@needs_q6k
def test_q6k_layers_run_their_blocks_and_stay_for_int8_without_the_q6k_kernel(tmp_path, monkeypatch):
    model, path = q4k_model_and_file(tmp_path, q6k=Q4_K_M_LIKE)
    assert use_gguf_blocks(model, str(path)) == (2 * 7 + 1, 0)
    assert isinstance(model.lm_head, Q6KLinear) and isinstance(model.model.layers[1].self_attn.v_proj, Q6KLinear)
    assert isinstance(model.model.layers[0].self_attn.v_proj, Q4KLinear)
    monkeypatch.setattr(native, "q6k_kernel", lambda: None)
    model, path = q4k_model_and_file(tmp_path / "..", q6k=Q4_K_M_LIKE)
    assert use_gguf_blocks(model, str(path)) == (2 * 7 + 1 - len(Q4_K_M_LIKE), len(Q4_K_M_LIKE))
    assert isinstance(model.lm_head, torch.nn.Linear)


@needs_kernel
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_k_tokens_at_once_give_the_logits_of_k_single_steps(tmp_path, layout):
    model = q4k_target(tmp_path, q6k=LAYOUTS[layout])
    as_cpu_target(model)
    prompt, tail = torch.tensor([[1, 5, 9, 12, 3]]), torch.tensor([[7, 40, 2, 2, 61, 13]])
    together, steps = block_and_steps(model, prompt, tail)
    assert torch.equal(together, steps)


@needs_kernel
@pytest.mark.parametrize("gamma", range(1, 9))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_greedy_speculative_equals_plain_with_a_q4k_target(tmp_path, gamma, layout):
    target = q4k_target(tmp_path, q6k=LAYOUTS[layout])
    as_cpu_target(target)
    assert accepted_with_greedy_parity(target, noisy_copy(target, 0.2, seed=7), gamma) > 0


@needs_kernel
def test_sampling_with_a_q4k_target_and_a_q4k_drafter_follows_the_target(tmp_path):
    """The default pair's kernels in small: a q4k target (the file's blocks) and a q4k
    drafter (a noisy copy, quantized by quantize_to_q4k). Three sampled tokens of seeded
    speculative runs against the q4k target's exact distribution (top-k 4: 64 outcomes).
    The random blocks give logits in the hundreds, 20 to 50 apart: temperature 40 spreads
    them over several tokens (at 1 the target is sure of every token and the check is empty)."""
    target, path = q4k_model_and_file(tmp_path)
    drafter = noisy_copy(target, 0.5, seed=3)
    assert quantize_to_q4k(drafter) == 2 * 7
    assert use_gguf_blocks(target, str(path)) == (2 * 7 + 1, 0)
    as_cpu_target(target)
    found, rejected = speculative_pvalues(target, drafter, [1, 5, 9], SamplingConfig(temperature=40.0, top_k=4))
    assert rejected > 100  # q differs from p: rejections and corrections really happen
    assert min(found.values()) > 1e-3, found


def test_a_q4k_target_is_a_gguf_model_on_the_cpu(tmp_path):
    with pytest.raises(ModelError, match="--dtype q4k runs on the CPU only"):
        parse_target_dtype("q4k", "cuda")
    with pytest.raises(ModelError, match="--draft-dtype q4k runs on the CPU only"):
        parse_draft_dtype("q4k", "cuda")
    if native.q4k_kernel() is not None:
        folder = save_tiny(tmp_path / "tiny")
        with pytest.raises(
            ModelError, match="--dtype q4k runs a GGUF file's Q4_K blocks; the target tiny is not a .gguf file"
        ):
            load_model(parse_model_spec(str(folder)), role="target", dtype="q4k")


def test_without_the_kernel_a_q4k_target_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setattr(native, "q4k_kernel", lambda: None)
    monkeypatch.setattr(native, "q4k_why_not", lambda: "SPECBENCH_NATIVE=0")
    if native.linear_kernel() is not None:
        with pytest.raises(ModelError, match="q4k target needs specbench's AVX2 kernel: SPECBENCH_NATIVE=0"):
            parse_target_dtype("q4k", "cpu")
    with pytest.raises(RuntimeError, match="SPECBENCH_NATIVE=0"):
        gguf_blocks.q4k_linear(torch.ones(1, QK), layer_of("Q4_K", 2, QK, seed=0))


def test_auto_is_q4k_for_a_gguf_target_with_q4k_layers_int8_for_others_float32_without_kernels(monkeypatch, tmp_path):
    from specbench.models.dtypes import resolve_target_dtype
    from specbench.models.loading import PairConfig

    _, q4k_file = q4k_model_and_file(tmp_path)
    folder = save_tiny(tmp_path / "tiny")
    both = native.q4k_kernel() is not None and native.linear_kernel() is not None
    assert (
        resolve_target_dtype("auto", "cpu")
        == PairConfig().dtype
        == ("q4k" if both else "float32" if native.linear_kernel() is None else "int8")
    )
    assert resolve_target_dtype("auto", "cpu", str(q4k_file)) == (
        "q4k" if both else resolve_target_dtype("auto", "cpu", str(folder))
    )
    assert resolve_target_dtype("auto", "cpu", str(folder)) == (
        "int8" if native.linear_kernel() is not None else "float32"
    )
    assert resolve_target_dtype("auto", "cuda") == "bfloat16" and resolve_target_dtype("auto", "auto") == "float32"
    assert resolve_target_dtype("bfloat16", "cpu") == "bfloat16"  # named dtypes pass through
    monkeypatch.setattr(native, "q4k_kernel", lambda: None)
    monkeypatch.setattr(native, "q4k_why_not", lambda: "SPECBENCH_NATIVE=0")
    assert resolve_target_dtype("auto", "cpu") == ("int8" if native.linear_kernel() is not None else "float32")
    monkeypatch.setattr(native, "linear_kernel", lambda: None)
    monkeypatch.setattr(native, "linear_why_not", lambda: "SPECBENCH_NATIVE=0")
    assert resolve_target_dtype("auto", "cpu") == "float32"
