"""Prompt sets: read prompt files by path or by name, filter them by category.

A file is JSONL (one record a line), a JSON array of the same records (`.json`), or plain
text (`.txt`: every non-blank line is one single-turn prompt). A record is any of these, and
one file may mix them:

    {"id": "mt-03", "category": "multi-turn", "turns": ["user 1", "user 2"], "replies": ["assistant 1"]}
    {"question_id": 81, "category": "writing", "turns": ["user 1", "user 2"]}      (Spec-Bench)
    {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}]}
    {"prompt": "one user message"}         (also "question", "text", or "instruction" + "input")

`turns` are the user's messages in order; a single string is one turn. `messages` (the chat
format) become turns, replies and a system message; a trailing assistant message is the
reference answer and is left out. The id is `id`, `question_id` or `task_id`, else the
record's number; a record without a category is in UNCATEGORIZED. `replies` (optional) are
fixed assistant answers to every turn but the last; with them a prompt is a whole
conversation, sent as alternating user/assistant chat messages ending with the last user
turn. Fixed replies keep the prompt identical for every method in a sweep. A prompt with
several turns and no replies (Spec-Bench files) sends only its first turn: the later turns
answer the model's own earlier output, which would make the prompt depend on the method
being measured.

Names ("default", "quick", ...) are the JSONL files shipped in specbench/bench/prompt_sets/.
This module knows nothing about tokenizers or models; it imports only the standard library.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specbench.errors import PromptError

PROMPTS_DIR = Path(__file__).resolve().parent / "prompt_sets"
DEFAULT_SET = "default"
UNCATEGORIZED = "uncategorized"


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    turns: tuple[str, ...]  # the user's messages
    replies: tuple[str, ...] = ()  # fixed assistant answers to turns[:-1], or none
    system: str = ""  # a system message sent first, or none

    def messages(self) -> list[dict[str, str]]:
        """Chat messages to send: the whole conversation with replies, else the first turn only."""
        messages = [{"role": "system", "content": self.system}] if self.system else []
        if not self.replies:
            return messages + [{"role": "user", "content": self.turns[0]}]
        for turn, reply in zip(self.turns, self.replies):
            messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": reply}]
        return messages + [{"role": "user", "content": self.turns[-1]}]


# ---------------------------------------------------------------------------- parsing


ID_KEYS = ("id", "question_id", "task_id")
TEXT_KEYS = ("prompt", "question", "text", "instruction")  # a single turn, the first one present
LINES_SUFFIXES = (".jsonl", ".ndjson", "")  # one JSON object per line (a file with no suffix too)


def parse_prompt(data: object, where: str, line: int = 1) -> Prompt:
    """One record (any of the module docstring's forms) -> Prompt; PromptError names `where`
    on a problem. `line` names a record that has no id."""
    if not isinstance(data, dict):
        raise PromptError(f"{where}: expected a JSON object, got {type(data).__name__}")
    pid = next((data[key] for key in ID_KEYS if data.get(key) is not None), line)
    if str(pid).strip() == "":
        raise PromptError(f"{where}: 'id' is empty")
    category = data.get("category", UNCATEGORIZED)
    if not isinstance(category, str) or not category.strip():
        raise PromptError(f"{where}: 'category' must be a non-empty string")
    if "turns" not in data and "messages" in data:
        data = {**data, **_from_messages(data["messages"], where)}
    elif "turns" not in data and (key := next((k for k in TEXT_KEYS if isinstance(data.get(k), str)), None)):
        if not data[key].strip():
            raise PromptError(f"{where}: '{key}' is empty")
        text = data[key] + (
            f"\n\n{data['input']}"
            if key == "instruction" and isinstance(data.get("input"), str) and data["input"].strip()
            else ""
        )
        data = {**data, "turns": [text]}
    if not data.get("turns"):
        raise PromptError(
            f"{where}: needs 'turns' (a non-empty list of strings), 'messages', or a prompt string"
            f" ({', '.join(TEXT_KEYS)})"
        )
    turns = _strings([data["turns"]] if isinstance(data["turns"], str) else data["turns"], "turns", where)
    replies = _strings(data.get("replies", []), "replies", where)
    if replies and len(replies) != len(turns) - 1:
        raise PromptError(f"{where}: {len(turns)} turns need {len(turns) - 1} replies, got {len(replies)}")
    system = data.get("system", "")
    if not isinstance(system, str):
        raise PromptError(f"{where}: 'system' must be a string")
    return Prompt(str(pid), category.strip(), tuple(turns), tuple(replies), system.strip())


def _from_messages(messages: object, where: str) -> dict:
    """Chat messages -> {"turns", "replies", "system"}: an optional system message first, then
    user and assistant messages alternating from the user's; a trailing assistant message (the
    reference answer) is dropped."""
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages
    ):
        raise PromptError(f'{where}: \'messages\' must be a list of {{"role": ..., "content": "..."}} objects')
    roles = [m.get("role") for m in messages]
    system = messages[0]["content"] if roles[:1] == ["system"] else ""
    chat = messages[1:] if system else messages
    if chat and chat[-1].get("role") == "assistant":
        chat = chat[:-1]
    expected = ["user", "assistant"] * len(chat)
    if not chat or [m.get("role") for m in chat] != expected[: len(chat)] or len(chat) % 2 == 0:
        raise PromptError(
            f"{where}: 'messages' must alternate user and assistant, from a user message to a user message"
            " (after an optional system message)"
        )
    return {"turns": [m["content"] for m in chat[::2]], "replies": [m["content"] for m in chat[1::2]], "system": system}


def _strings(value: object, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise PromptError(f"{where}: '{key}' must be a list of non-empty strings")
    return value


def parse_lines(lines: list[str], source: str) -> list[Prompt]:
    """JSONL text lines -> prompts (blank lines skipped); duplicate ids are an error."""
    records = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                records.append((f"{source}:{number}", number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise PromptError(f"{source}:{number}: not valid JSON ({exc.msg})") from None
    return _prompts(records, source)


def _lines(text: str) -> list[str]:
    """A file's lines, split at newlines only: str.splitlines also splits at U+2028, form
    feeds and the like, which a JSON string or a prompt may hold (read_text has already
    turned \r\n into \n)."""
    return text.split("\n")


def parse_text(text: str, source: str) -> list[Prompt]:
    """A plain text file -> one single-turn prompt per non-blank line, named by its number."""
    return _prompts(
        [
            (f"{source}:{n}", n, {"prompt": line.strip()})
            for n, line in enumerate(_lines(text), start=1)
            if line.strip()
        ],
        source,
    )


def parse_json(text: str, source: str) -> list[Prompt]:
    """A JSON file: an array of records (or one record) -> prompts, numbered from 1."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PromptError(f"{source}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    records = data if isinstance(data, list) else [data]
    return _prompts([(f"{source}: record {n}", n, record) for n, record in enumerate(records, start=1)], source)


def _prompts(records: list[tuple[str, int, object]], source: str) -> list[Prompt]:
    """(where, number, record) -> prompts; duplicate ids and an empty file are errors."""
    prompts, seen = [], set()
    for where, number, data in records:
        prompt = parse_prompt(data, where, number)
        if prompt.id in seen:
            raise PromptError(f"{where}: duplicate prompt id {prompt.id!r}")
        seen.add(prompt.id)
        prompts.append(prompt)
    if not prompts:
        raise PromptError(f"{source}: no prompts in the file")
    return prompts


# ---------------------------------------------------------------------------- files and names


def available_sets() -> list[str]:
    """Names of the shipped prompt sets."""
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.jsonl"))


def resolve_prompt_file(spec: str) -> Path:
    """A path to a prompt file, or the name of a shipped set ("default", "quick")."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    named = PROMPTS_DIR / f"{spec}.jsonl"
    if "/" not in spec and named.is_file():
        return named
    names = ", ".join(available_sets()) or "none found"
    raise PromptError(f"no prompt file {spec!r}: give a path to a .jsonl, .json or .txt file or a set name ({names})")


def load_prompts(spec: str = DEFAULT_SET, categories: list[str] | tuple[str, ...] = ()) -> list[Prompt]:
    """Prompts from a file path or set name, keeping only `categories` when any are given."""
    path = resolve_prompt_file(spec)
    suffix = path.suffix.lower()
    if suffix not in (".txt", ".json", *LINES_SUFFIXES):
        raise PromptError(
            f"{path}: a {suffix} file is not a prompt file specbench reads: give a .jsonl, .json or .txt file"
            " (formats: specbench/bench/prompt_sets/README.md)"
        )
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: a byte-order mark is not text
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"cannot read {path}: {exc}") from None
    prompts = (
        parse_text(text, str(path))
        if suffix == ".txt"
        else parse_json(text, str(path))
        if suffix == ".json"
        else parse_lines(_lines(text), str(path))
    )
    return filter_categories(prompts, categories, str(path))


def filter_categories(prompts: list[Prompt], categories, source: str = "the prompt set") -> list[Prompt]:
    """Keep prompts of the given categories (all when none given); unknown categories are an error."""
    if not categories:
        return prompts
    known = list(dict.fromkeys(p.category for p in prompts))
    unknown = [c for c in categories if c not in known]
    if unknown:
        raise PromptError(f"no category {', '.join(map(repr, unknown))} in {source}; it has: {', '.join(known)}")
    wanted = set(categories)
    return [p for p in prompts if p.category in wanted]
