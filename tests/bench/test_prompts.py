"""The prompt loader (ours and Spec-Bench's format), its errors, and the shipped sets' counts."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from specbench.bench.prompts import PROMPTS_DIR, Prompt, PromptError, available_sets, load_prompts

MIN_CATEGORIES, MIN_PER_CATEGORY = 6, 8


def write_lines(path, records):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def test_default_set_meets_the_counts():
    prompts = load_prompts("default")
    per_category = Counter(p.category for p in prompts)
    assert len(per_category) >= MIN_CATEGORIES
    assert min(per_category.values()) >= MIN_PER_CATEGORY
    assert len({p.id for p in prompts}) == len(prompts)
    assert any(len(p.turns) > 1 and p.replies for p in prompts)  # real multi-turn conversations


def test_quick_set_is_one_default_prompt_per_category():
    default = {p.id: p for p in load_prompts("default")}
    quick = load_prompts("quick")
    assert [p.category for p in quick] == list(dict.fromkeys(p.category for p in default.values()))
    assert all(default[p.id] == p for p in quick)
    assert {"default", "quick"} <= set(available_sets())


def test_load_by_path_and_filter_by_category():
    prompts = load_prompts(str(PROMPTS_DIR / "default.jsonl"), ["math", "translation"])
    assert {p.category for p in prompts} == {"math", "translation"} and len(prompts) >= 16


def test_spec_bench_question_file(tmp_path):
    """Spec-Bench lines use question_id (a number) and user-only turns: only the first turn
    is sent, since the second answers the model's own first reply."""
    path = write_lines(
        tmp_path / "question.jsonl",
        [
            {"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Now make it rhyme."]},
            {"question_id": 82, "category": "math_reasoning", "turns": ["What is 2 + 2?"]},
        ],
    )
    prompts = load_prompts(str(path))
    assert [(p.id, p.category) for p in prompts] == [("81", "writing"), ("82", "math_reasoning")]
    assert prompts[0].messages() == [{"role": "user", "content": "Write a poem."}]


def test_replies_make_alternating_messages():
    prompt = Prompt("x", "multi-turn", ("u1", "u2", "u3"), ("a1", "a2"))
    roles = [(m["role"], m["content"]) for m in prompt.messages()]
    assert roles == [("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2"), ("user", "u3")]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ('["a list"]', "expected a JSON object"),
        ({"id": " ", "category": "c", "turns": ["t"]}, "'id' is empty"),
        ({"id": "a", "category": "", "turns": ["t"]}, "'category' must be"),
        ({"id": "a", "category": "c"}, "needs 'turns'"),
        ({"id": "a", "category": "c", "turns": []}, "needs 'turns'"),
        ({"id": "a", "prompt": ["not", "a string"]}, "needs 'turns'"),
        ({"id": "a", "prompt": "   "}, "'prompt' is empty"),
        ({"id": "a", "question": ""}, "'question' is empty"),
        ({"id": "a", "category": "c", "turns": ["t", 3]}, "'turns' must be"),
        ({"id": "a", "category": "c", "turns": ["t1", "t2"], "replies": ["r1", "r2"]}, "need 1 replies"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, line, message):
    path = write_lines(tmp_path / "p.jsonl", [{"id": "ok", "category": "c", "turns": ["fine"]}, line])
    with pytest.raises(PromptError, match=message) as info:
        load_prompts(str(path))
    assert "p.jsonl:2" in str(info.value)


def test_minimal_lines_get_their_line_number_and_no_category(tmp_path):
    """A file of bare prompts, as many benchmarks ship them, loads without ids or categories."""
    path = write_lines(
        tmp_path / "bare.jsonl",
        [{"prompt": "Write a haiku."}, {"turns": ["Sum 2 and 3."], "category": "math"}, {"id": "q", "prompt": "Why?"}],
    )
    prompts = load_prompts(str(path))
    assert [(p.id, p.category, p.turns) for p in prompts] == [
        ("1", "uncategorized", ("Write a haiku.",)),
        ("2", "math", ("Sum 2 and 3.",)),
        ("q", "uncategorized", ("Why?",)),
    ]


def test_file_level_errors(tmp_path):
    with pytest.raises(PromptError, match="no prompt file"):
        load_prompts(str(tmp_path / "missing.jsonl"))
    with pytest.raises(PromptError, match="default, quick|default"):
        load_prompts("no-such-set")
    with pytest.raises(PromptError, match="no prompts"):
        load_prompts(str(write_lines(tmp_path / "empty.jsonl", [""])))
    dup = write_lines(tmp_path / "dup.jsonl", [{"id": "a", "category": "c", "turns": ["t"]}] * 2)
    with pytest.raises(PromptError, match="duplicate prompt id 'a'"):
        load_prompts(str(dup))
    with pytest.raises(PromptError, match="no category 'poetry'.*it has: code-writing"):
        load_prompts("default", ["poetry"])
    table = tmp_path / "prompts.csv"
    table.write_text("id,prompt\na,Write a haiku.\n")
    with pytest.raises(
        PromptError, match=r"a \.csv file is not a prompt file specbench reads: give a \.jsonl, \.json or \.txt"
    ):
        load_prompts(str(table))
    no_suffix = write_lines(tmp_path / "prompts", [{"prompt": "Write a haiku."}])  # read as lines of JSON
    assert [p.turns for p in load_prompts(str(no_suffix))] == [("Write a haiku.",)]


def test_plain_text_files_give_one_prompt_a_line(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text(
        "\ufeffWrite a haiku.\n\n  Explain recursion.  \n", encoding="utf-8"
    )  # a byte-order mark, a blank line
    prompts = load_prompts(str(path))
    assert [(p.id, p.category, p.turns) for p in prompts] == [
        ("1", "uncategorized", ("Write a haiku.",)),
        ("3", "uncategorized", ("Explain recursion.",)),
    ]


def test_lines_split_at_newlines_only(tmp_path):
    """U+2028 (which json.dumps(..., ensure_ascii=False) writes raw inside a string) and form
    feeds are text, not line ends; \r\n is one line end. A `turns` string is one turn."""
    records = [{"id": "a", "prompt": "one\u2028two\x0cthree"}, {"id": "b", "turns": "a single turn"}]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in records), encoding="utf-8")
    assert [p.turns for p in load_prompts(str(jsonl))] == [("one\u2028two\x0cthree",), ("a single turn",)]
    text = tmp_path / "p.txt"
    text.write_text("first\u2028still the first\r\nsecond\n", encoding="utf-8")
    assert [p.turns for p in load_prompts(str(text))] == [("first\u2028still the first",), ("second",)]


def test_json_arrays_and_the_common_record_forms(tmp_path):
    """Chat messages (system, replies, a trailing reference answer), HumanEval's task_id,
    Alpaca's instruction + input, and a bare question, in one JSON array."""
    records = [
        {
            "id": "chat",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "u1"},
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "u2"},
                {"role": "assistant", "content": "the reference"},
            ],
        },
        {"task_id": "HumanEval/0", "prompt": "def f():\n"},
        {"instruction": "Translate to French.", "input": "Good morning", "output": "Bonjour"},
        {"question": "Why is the sky blue?", "category": "qa"},
    ]
    path = tmp_path / "set.json"
    path.write_text(json.dumps(records))
    chat, code, alpaca, question = load_prompts(str(path))
    assert chat.messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "u2"},
    ]
    assert (code.id, code.turns) == ("HumanEval/0", ("def f():\n",))
    assert (alpaca.id, alpaca.turns) == ("3", ("Translate to French.\n\nGood morning",))
    assert (question.id, question.category, question.turns) == ("4", "qa", ("Why is the sky blue?",))


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ("hello", "'messages' must be a list"),
        ([{"role": "user"}], "'messages' must be a list"),
        ([{"role": "assistant", "content": "a"}], "must alternate"),
        ([{"role": "user", "content": "u"}, {"role": "user", "content": "u"}], "must alternate"),
        ([{"role": "system", "content": "s"}], "must alternate"),
    ],
)
def test_malformed_chat_messages_name_the_record(tmp_path, messages, message):
    path = write_lines(tmp_path / "chat.jsonl", [{"messages": messages}])
    with pytest.raises(PromptError, match=message) as info:
        load_prompts(str(path))
    assert "chat.jsonl:1" in str(info.value)


def test_a_broken_json_file_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[{"prompt": "a"},')
    with pytest.raises(PromptError, match="broken.json: not valid JSON"):
        load_prompts(str(path))
    (tmp_path / "records.json").write_text('[{"prompt": "a"}, {"prompt": 3}]')
    with pytest.raises(PromptError, match="records.json: record 2: needs 'turns'"):
        load_prompts(str(tmp_path / "records.json"))
