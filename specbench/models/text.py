"""Text in and out of a tokenizer: a prompt (or chat messages) to ids, ids to streamed text.

This module owns the one rule for prompts (encode_prompt) that `generate`, the sweep and the
bench scripts share, the check that a prompt fits the context, and incremental detokenizing.
It knows nothing of models beyond their tokenizer.
"""

from __future__ import annotations

from jinja2 import TemplateError  # what a chat template raises (transformers renders them with jinja2)

from specbench.core.generate import check_prompt
from specbench.drafters.model import common_prefix
from specbench.errors import PromptError, reraise_as

Message = dict[str, str]  # {"role": "user" | "assistant" | "system", "content": text}


def encode_prompt(tokenizer, prompt: str | list[Message], *, raw: bool = False) -> list[int]:
    """Prompt ids. A string is one user turn; a list is chat messages ending with the user's.

    With a chat template (and not raw), the template renders the messages and the assistant's
    generation prompt. Without one, or with raw, the text is fed as is: a single user turn is
    its content alone, several messages a plain transcript ("User: ..." and "Assistant: ..."
    paragraphs ending with "Assistant:"); the tokenizer adds its own special tokens (a BOS).
    """
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if not any(m["content"].strip() for m in messages):
        raise PromptError("the prompt is empty")
    if not raw and getattr(tokenizer, "chat_template", None):
        try:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except TemplateError as exc:  # e.g. a template without a system role
            raise PromptError(
                f"the tokenizer's chat template refused the prompt: {exc} (--raw sends the text without it)"
            ) from None
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if len(messages) == 1:
        text = messages[0]["content"]
    else:
        text = "\n\n".join(f"{m['role'].title()}: {m['content']}" for m in messages) + "\n\nAssistant:"
    return list(tokenizer(text)["input_ids"])


HEAD_PROBES = ("a", "7", "?")  # one-character prompts unlike each other: only the template's ids are common


def template_head(tokenizer) -> list[int]:
    """The ids encode_prompt puts before every one-turn prompt's text: a chat template's
    opening (its default system turn, the user turn's header), or a BOS without one; what a
    model drafter keeps read between generations (drafters.model.keep_head). The ids that
    the encodings of HEAD_PROBES share, so a template that joins its last characters with
    the text's first into one token leaves that token out; [] if the template refuses."""
    try:
        probes = [encode_prompt(tokenizer, text) for text in HEAD_PROBES]
    except PromptError:
        return []
    return probes[0][: min(common_prefix(probes[0], ids) for ids in probes[1:])]


def check_prompt_fits(prompt_ids: list[int], limit: int) -> None:
    """core.generate.check_prompt's rule (not empty, room for a new token), as PromptError."""
    with reraise_as(PromptError):
        check_prompt(len(prompt_ids), limit)


class TextStream:
    """Turns tokens into text as they arrive: push(ids) returns only the new text.

    Decodes the whole output each time (token boundaries can split characters and change
    spacing) and holds back text that ends inside a multi-byte character.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.shown = ""

    def push(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        return self._advance(text)

    def finish(self) -> str:
        """The rest of the text, a trailing partial character included."""
        return self._advance(self.tokenizer.decode(self.ids, skip_special_tokens=True))

    def _advance(self, text: str) -> str:
        new = text[len(self.shown) :] if text.startswith(self.shown) else ""
        self.shown = text
        return new
