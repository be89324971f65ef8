"""Find the final answer(s) a response states, in the formats LLM math datasets use.

Every extractor returns ALL occurrences in order of position (the caller decides what several mean),
runs in time linear in the response length (single regex/bracket scans, no nested quantifiers), and
returns raw answer text (normalisation is :mod:`rlforge.rewards.normalize`'s job).

Formats:

- ``boxed``: ``\\boxed{...}`` / ``\\fbox{...}`` with nested braces; only outermost boxes count (a box
  inside a box is part of its content); an unclosed box (truncated response) is ignored.
- ``hash``: ``#### <rest of the line>`` (GSM8K).
- ``answer_tag``: ``<answer>...</answer>`` (case-insensitive; an unclosed tag is ignored).
- ``answer_is``: ``... answer is <text up to the end of the sentence or line>``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = [
    "EXTRACTORS",
    "extract_answer_is",
    "extract_answer_tag",
    "extract_boxed",
    "extract_hash",
    "strip_thinking",
]

# Raw answer texts longer than this are cut (normalisation rejects over-long answers anyway).
_MAX_RAW_CHARS = 1000

_BOX_TOKENS = re.compile(r"\\[{}]|\\(?:boxed|fbox)[ \t]*\{|[{}]")
_HASH = re.compile(r"(?<!#)####(?!#)[ \t]*([^\n]{0,1000})")
_ANSWER_TAG = re.compile(r"<(/?)answer>", re.IGNORECASE)
# Zero-width match + lookahead capture: finds overlapping occurrences ("the answer is 5, no, the answer is 6").
_ANSWER_IS = re.compile(r"\banswer is\b(?=[ \t]*:?[ \t]*([^\n]{0,300}))", re.IGNORECASE)
# End of a sentence: . , ; ! ? followed by whitespace or the end (so 3.5 and 1,000 stay whole).
_SENTENCE_END = re.compile(r"[.,;!?](?=\s|$)")


def extract_boxed(text: str) -> list[str]:
    """Contents of the outermost ``\\boxed{...}``/``\\fbox{...}`` groups, in order.

    One pass over brace tokens with a stack, so ``\\boxed{`` repeated 100k times stays linear. Escaped
    braces (``\\{``, ``\\}``) are content, not structure.

    Args:
        text: The response text.
    """
    found: list[tuple[int, str]] = []
    stack: list[int] = []  # start of content for a box, -1 for a plain brace
    boxes_open = 0
    for tok in _BOX_TOKENS.finditer(text):
        t = tok.group()
        if len(t) == 2 and t[0] == "\\" and t[1] in "{}":
            continue
        if t == "}":
            if not stack:
                continue  # stray closing brace: ignore
            start = stack.pop()
            if start >= 0:
                boxes_open -= 1
                if boxes_open == 0:
                    found.append((start, text[start : min(tok.start(), start + _MAX_RAW_CHARS)]))
        elif t == "{":
            stack.append(-1)
        else:  # \boxed{ or \fbox{
            stack.append(tok.end())
            boxes_open += 1
    return [content for _, content in found]


def extract_hash(text: str) -> list[str]:
    """The rest of the line after each ``####`` marker (exactly four ``#``), in order.

    Args:
        text: The response text.
    """
    return [m.group(1) for m in _HASH.finditer(text)]


def extract_answer_tag(text: str) -> list[str]:
    """Contents of each closed ``<answer>...</answer>`` pair (innermost open tag wins), in order.

    Args:
        text: The response text.
    """
    found: list[str] = []
    open_end = -1
    for m in _ANSWER_TAG.finditer(text):
        if m.group(1):  # closing tag
            if open_end >= 0:
                found.append(text[open_end : min(m.start(), open_end + _MAX_RAW_CHARS)])
                open_end = -1
        else:
            open_end = m.end()
    return found


def extract_answer_is(text: str) -> list[str]:
    """The text after each "answer is" (optionally followed by ``:``) up to the end of the sentence.

    Args:
        text: The response text.
    """
    found: list[str] = []
    for m in _ANSWER_IS.finditer(text):
        rest = m.group(1)
        end = _SENTENCE_END.search(rest)
        found.append(rest[: end.start()] if end else rest)
    return found


EXTRACTORS: dict[str, Callable[[str], list[str]]] = {
    "boxed": extract_boxed,
    "hash": extract_hash,
    "answer_tag": extract_answer_tag,
    "answer_is": extract_answer_is,
}


def strip_thinking(
    text: str, open_tag: str = "<think>", close_tag: str = "</think>", opened_in_prompt: bool = False
) -> str:
    """The part of a response that may hold the final answer: what follows the last ``close_tag``.

    With no ``close_tag`` the thinking never finished: the result is what precedes the first
    ``open_tag`` (usually nothing), or nothing at all if the prompt opened the block (chat templates
    that end the generation prompt with ``<think>``). With neither tag the whole text is returned.

    Args:
        text: The response text.
        open_tag: The tag that opens a reasoning block.
        close_tag: The tag that closes it.
        opened_in_prompt: The prompt ended with ``open_tag``.
    """
    close = text.rfind(close_tag)
    if close >= 0:
        return text[close + len(close_tag) :]
    if opened_in_prompt:
        return ""
    opened = text.find(open_tag)
    if opened >= 0:
        return text[:opened]
    return text
