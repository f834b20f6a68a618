"""Tool output cut by the task: head, tail, and the lines in between that bear on the question.

Why: head and tail alone keep a build log's command and its last summary, but a failing
assertion 30-70% of the way down a 60,000-line CI log, or the one JSON record the question
names, falls in the cut. Lines are scored without a model (this runs inside ``assemble`` on
logs of megabytes): an alarm word (error, exception, traceback, failed, assert...) and the
question's own words and identifiers (``test_parse``, ``db.py``, an error code), each
weighted by how rare it is among the lines, so a log where every line says "error" does not
drown the one line naming the test asked about. The best lines go in with a line of context
on each side, in their order, every gap marked with the number of lines cut; the rest of the
room goes to the head and the tail as before. A text with no such line is cut as
:func:`~contextkit.assembly._prune.head_and_tail` cuts it.
"""

from __future__ import annotations

import math
import re

from contextkit.assembly._prune import head_and_tail
from contextkit.core.tokenizers import Tokenizer

__all__ = ["task_cut"]

#: Words a tool writes where something went wrong.
_ALARM = re.compile(r"\b(?:errors?|exceptions?|traceback|fail(?:ed|ure|ures|s|ing)?|fatal|panic(?:ked)?|"
                    r"assert(?:ion)?(?:error)?|abort(?:ed)?|denied|refused|timed? ?out|segmentation|critical|"
                    r"killed|cannot|undefined|not found|invalid|unexpected|warn(?:ing)?s?)\b", re.IGNORECASE)
#: Identifiers and words of the question worth finding in a line (``test_parse``, ``src/db.py``, ``E1101``).
_IDENT = re.compile(r"[A-Za-z0-9][\w.\-/:]*[A-Za-z0-9]|[A-Za-z0-9]")
_STOP = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been it its this that these those "
    "what which who how why when where do does did can could would should will not no yes my our your their me we "
    "you they i there here why happen happened happens get got show shows tell line lines log logs output".split())
_MIDDLE_SHARE = 0.5  # of the room at most, for the lines that bear on the question
_HEAD_SHARE = 0.3  # of the room they leave, for the head (the rest: the tail)
_CONTEXT = 1  # lines kept on each side of a chosen line


def task_cut(text: str, max_tokens: int, tokenizer: Tokenizer, query: str | None) -> str | None:
    """``text`` within about ``max_tokens``: head, tail and the lines that bear on ``query`` (see the
    module's docstring); None when not a line fits."""
    if len(text) <= 8 * max_tokens and tokenizer.count(text) <= max_tokens:
        return text
    lines = text.split("\n")
    scores = _scores(lines, query or "")
    room = max_tokens - 24  # the marks between runs are counted as they are added
    if not scores or room < 32:
        return head_and_tail(text, max_tokens, tokenizer)
    mark = tokenizer.count(_mark(99_999, 9_999_999)) + 1
    kept, used = _pick(lines, scores, range(1, len(lines) - 1), int(room * _MIDDLE_SHARE), tokenizer, mark)
    kept |= _ends(lines, kept, room - used, tokenizer)
    shown = _joined(lines, kept)
    return shown if tokenizer.count(shown) <= max_tokens else head_and_tail(text, max_tokens, tokenizer)


def _scores(lines: list[str], query: str) -> dict[int, float]:
    """Each line that bears on the question or says something went wrong, scored (none: an empty dict).

    Each clue (a word of the question, an alarm word) weighs its inverse line frequency: a word on
    half the lines or more tells nothing, so "error" on every line of a noisy run gives way to the
    one "refused"."""
    wanted = {w.lower() for w in _IDENT.findall(query) if len(w) > 2 and w.lower() not in _STOP}
    lowered = [line.lower() for line in lines]
    clues: dict[str, list[int]] = {w: [i for i, low in enumerate(lowered) if w in low] for w in wanted}
    for i, line in enumerate(lines):
        for alarm in {m.lower() for m in _ALARM.findall(line)}:
            clues.setdefault("\0" + alarm, []).append(i)
    n = len(lines)
    scores: dict[int, float] = {}
    for hits in clues.values():
        if not hits or len(hits) > n // 2:
            continue
        weight = math.log(n / len(hits))
        for i in hits:
            scores[i] = scores.get(i, 0.0) + weight
    return scores


def _pick(lines: list[str], scores: dict[int, float], middle: range, room: int, tokenizer: Tokenizer,
          mark: int) -> tuple[set[int], int]:
    """The lines of ``middle`` to keep, and their tokens: the best-scored first (later ones first on a tie:
    a log's last error is the nearest to its summary), each with its context, within ``room``."""
    kept: set[int] = set()
    used = 0
    for best in sorted((i for i in scores if i in middle), key=lambda i: (-scores[i], -i)):
        for i in (best, *range(best - _CONTEXT, best), *range(best + 1, best + _CONTEXT + 1)):
            if i in kept or i not in middle or len(lines[i]) > 8 * max(room - used, 1):
                continue
            need = tokenizer.count(lines[i]) + 1 + (0 if (i - 1 in kept or i + 1 in kept) else mark)
            if used + need > room:
                return kept, used
            kept.add(i)
            used += need
    return kept, used


def _ends(lines: list[str], kept: set[int], room: int, tokenizer: Tokenizer) -> set[int]:
    """The head and the tail in the room the chosen lines left: :data:`_HEAD_SHARE` of it to the head."""
    head = _run(lines, range(len(lines)), kept, int(room * _HEAD_SHARE), tokenizer)
    rest = room - sum(tokenizer.count(lines[i]) + 1 for i in head)
    return head | _run(lines, range(len(lines) - 1, -1, -1), kept | head, rest, tokenizer)


def _run(lines: list[str], order: range, taken: set[int], room: int, tokenizer: Tokenizer) -> set[int]:
    """Lines in ``order`` while they fit ``room`` (those already ``taken`` cost nothing and are passed)."""
    out: set[int] = set()
    used = 0
    for i in order:
        if i in taken:
            continue
        line = lines[i]
        need = tokenizer.count(line) + 1 if len(line) <= 8 * max(room - used, 1) else room + 1
        if used + need > room:
            break
        out.add(i)
        used += need
    return out


def _joined(lines: list[str], kept: set[int]) -> str:
    """The kept lines in order, each gap marked with how many lines (and characters) it cut."""
    out: list[str] = []
    last = -1
    for i in [*sorted(kept), len(lines)]:
        gap = i - last - 1
        if gap > 0:
            out.append(_mark(gap, sum(len(x) + 1 for x in lines[last + 1:i])))
        if i < len(lines):
            out.append(lines[i])
        last = i
    return "\n".join(out)


def _mark(lines: int, chars: int) -> str:
    return f"[… {lines:,} line{'s' * (lines != 1)} ({chars:,} characters) cut here …]"
