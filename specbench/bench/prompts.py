"""Prompt sets: read JSONL prompt files by path or by name, filter them by category.

Two line formats are read, and may even be mixed in one file:

    {"id": "mt-03", "category": "multi-turn", "turns": ["user 1", "user 2"], "replies": ["assistant 1"]}
    {"question_id": 81, "category": "writing", "turns": ["user 1", "user 2"]}      (Spec-Bench)

    {"prompt": "one user message"}                                                  (minimal)

`turns` are the user's messages in order; a `prompt` string is one turn. A line without an
id is named by its line number, one without a category is in UNCATEGORIZED. `replies` (optional) are fixed assistant answers to
every turn but the last; with them a prompt is a whole conversation, sent as alternating
user/assistant chat messages ending with the last user turn. Fixed replies keep the prompt
identical for every method in a sweep. A prompt with several turns and no replies (Spec-Bench
files) sends only its first turn: the later turns answer the model's own earlier output, which
would make the prompt depend on the method being measured.

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

    def messages(self) -> list[dict[str, str]]:
        """Chat messages to send: the whole conversation with replies, else the first turn only."""
        if not self.replies:
            return [{"role": "user", "content": self.turns[0]}]
        messages = []
        for turn, reply in zip(self.turns, self.replies):
            messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": reply}]
        return messages + [{"role": "user", "content": self.turns[-1]}]


# ---------------------------------------------------------------------------- parsing


def parse_prompt(data: object, where: str, line: int = 1) -> Prompt:
    """One JSONL record (ours, Spec-Bench's or a bare "prompt") -> Prompt; PromptError names
    `where` on a problem. `line` names a record that has no id."""
    if not isinstance(data, dict):
        raise PromptError(f"{where}: expected a JSON object, got {type(data).__name__}")
    pid = next((data[key] for key in ("id", "question_id") if data.get(key) is not None), line)
    if str(pid).strip() == "":
        raise PromptError(f"{where}: 'id' is empty")
    category = data.get("category", UNCATEGORIZED)
    if not isinstance(category, str) or not category.strip():
        raise PromptError(f"{where}: 'category' must be a non-empty string")
    if "turns" not in data and isinstance(data.get("prompt"), str):
        data = {**data, "turns": [data["prompt"]]}
    if not data.get("turns"):
        raise PromptError(f"{where}: needs 'turns', a non-empty list of strings (or 'prompt', a string)")
    turns = _strings(data["turns"], "turns", where)
    replies = _strings(data.get("replies", []), "replies", where)
    if replies and len(replies) != len(turns) - 1:
        raise PromptError(f"{where}: {len(turns)} turns need {len(turns) - 1} replies, got {len(replies)}")
    return Prompt(str(pid), category.strip(), tuple(turns), tuple(replies))


def _strings(value: object, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise PromptError(f"{where}: '{key}' must be a list of non-empty strings")
    return value


def parse_lines(lines: list[str], source: str) -> list[Prompt]:
    """JSONL text lines -> prompts (blank lines skipped); duplicate ids are an error."""
    prompts, seen = [], set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptError(f"{where}: not valid JSON ({exc.msg})") from None
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
    """A path to a JSONL file, or the name of a shipped set ("default", "quick")."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    named = PROMPTS_DIR / f"{spec}.jsonl"
    if "/" not in spec and named.is_file():
        return named
    names = ", ".join(available_sets()) or "none found"
    raise PromptError(f"no prompt file {spec!r}: give a path to a JSONL file or a set name ({names})")


def load_prompts(spec: str = DEFAULT_SET, categories: list[str] | tuple[str, ...] = ()) -> list[Prompt]:
    """Prompts from a file path or set name, keeping only `categories` when any are given."""
    path = resolve_prompt_file(spec)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"cannot read {path}: {exc}") from None
    return filter_categories(parse_lines(lines, str(path)), categories, str(path))


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
