"""Long chats with planted facts, some corrected later, for the session and history benches.

:func:`fact_chats` builds conversations of ``turns`` turns (70 by default) by joining Topical-Chat
conversations (``../shared/data/topical_chat/test_freq.json``; agent_1 is the user) of one split
(``tune``: conversations 300-379, ``heldout``: 380-538, as ``bench/bench_history.py`` splits them),
then plants five facts of ``data/history_paraphrase.json`` of the same split, one sentence each at
the end of a user turn at a seeded depth in the first ``turns - 20`` turns. One or two of them are
later **corrected**: a sentence of ``data/history_corrections.json`` with a new value of one slot,
in a user turn at least ten turns later (anywhere up to the last turn: some corrections fall in the
turns a session keeps verbatim). The question asks for one planted fact in the user's own,
paraphrased words; half the time a corrected one.

Scoring (what a prompt shows about the asked fact; values match as whole tokens, so "5 ml" is not
found inside "7.5 ml"):

* :func:`kept`: every current value of the fact is present;
* :func:`newest_shown`: the values the correction introduced are present (for a fact never
  corrected: :func:`kept`);
* :func:`older_as_current`: the prompt shows the superseded statement as if it held. Read in order,
  the last word on a fact is what a reader takes as current. So: the first statement (its sentence,
  verbatim) appears on a line not marked ``superseded``, and the correction's sentence does not
  appear after that occurrence. An old value repeated inside the correction ("7.5 ml, not 5 ml")
  is the correction speaking, not the old fact.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "topical_chat" / "test_freq.json"
FACTS = REPO / "data" / "history_paraphrase.json"
CORRECTIONS = REPO / "data" / "history_corrections.json"
SPLITS = {"tune": range(300, 380), "heldout": range(380, 539)}


@dataclass
class PlantedFact:
    """One planted fact: its current ``values``, the ``old_values`` a correction replaced (empty when
    never corrected), the turns it was stated (and corrected) in, and the sentences as planted."""

    id: str
    question: str
    values: list[str]
    old_values: list[str] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    stated: str = ""
    correction: str | None = None


@dataclass
class FactChat:
    """A chat (role/content dicts, oldest first), the final question and the fact it asks for."""

    messages: list[dict[str, str]]
    question: str
    asked: PlantedFact
    facts: list[PlantedFact]


def _conversations(path: Path = DATA) -> list[list[dict[str, str]]]:
    convs = list(json.loads(path.read_text(encoding="utf-8")).values())
    return [[{"role": "user" if t["agent"] == "agent_1" else "assistant", "content": t["message"]}
             for t in c["content"]] for c in convs]


def _chat_turns(convs: list[list[dict[str, str]]], span: range, turns: int, rng: random.Random) -> list[dict[str, str]]:
    """Topical-Chat conversations of ``span``, drawn in a seeded order, joined to ``turns`` turns."""
    messages: list[dict[str, str]] = []
    for i in rng.sample(list(span), len(span)):
        messages += [dict(m) for m in convs[i]]
        if len(messages) >= turns:
            break
    return messages[:turns]


def _plant(messages: list[dict[str, str]], turn: int, sentence: str) -> None:
    messages[turn]["content"] = f"{messages[turn]['content'].rstrip()} {sentence}"


def _one_chat(convs: list[list[dict[str, str]]], span: range, pool: list[dict[str, Any]],
              corrections: dict[str, dict[str, Any]], turns: int, rng: random.Random) -> FactChat:
    messages = _chat_turns(convs, span, turns, rng)
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    correctable = [f for f in pool if f["id"] in corrections]
    n_corrected = rng.choice([1, 2])
    chosen = rng.sample(correctable, n_corrected)
    chosen += rng.sample([f for f in pool if f not in chosen], 5 - n_corrected)
    rng.shuffle(chosen)
    early = sorted(rng.sample([i for i in users if i < turns - 20], 5))
    taken = set(early)
    facts = []
    for turn, fact in zip(early, chosen, strict=True):
        values = {slot: rng.choice(options) for slot, options in sorted(fact["slots"].items())}
        stated = fact["fact"].format(**values)
        _plant(messages, turn, stated)
        planted = PlantedFact(fact["id"], fact["question"], list(values.values()), turns=[turn], stated=stated)
        if fact["id"] in corrections and sum(p.correction is not None for p in facts) < n_corrected:
            fix = corrections[fact["id"]]
            slot, old = fix["slot"], values[fix["slot"]]
            values[slot] = rng.choice([v for v in fact["slots"][slot] if v != old])
            said = rng.choice(fix["templates"]).format(old=old, **values)
            later = rng.choice([i for i in users if i >= turn + 10 and i not in taken])
            taken.add(later)
            _plant(messages, later, said)
            planted.values, planted.old_values = list(values.values()), [old]
            planted.turns.append(later)
            planted.correction = said
        facts.append(planted)
    corrected = [f for f in facts if f.correction]
    asked = rng.choice(corrected if rng.random() < 0.5 else [f for f in facts if not f.correction])
    return FactChat(messages, asked.question, asked, facts)


def fact_chats(n: int, *, turns: int = 70, seed: int = 0, split: str = "heldout", data: Path = DATA) -> list[FactChat]:
    """``n`` chats of ``turns`` turns of ``split`` ("tune" or "heldout"), five facts each (see the module)."""
    span = SPLITS[split]
    convs = _conversations(data)
    pool = [f for f in json.loads(FACTS.read_text(encoding="utf-8"))["facts"] if f["split"] == split]
    corrections = {c["id"]: c for c in json.loads(CORRECTIONS.read_text(encoding="utf-8"))["corrections"]}
    rng = random.Random(f"{seed}:{split}")
    return [_one_chat(convs, span, pool, corrections, turns, rng) for _ in range(n)]


def _found(value: str, text: str, start: int = 0) -> list[int]:
    """Offsets of ``value`` as a whole token in ``text`` (not inside a longer number or word)."""
    return [m.start() for m in re.finditer(rf"(?<![\w.]){re.escape(value)}(?![\w]|\.\d)", text[start:])]


def kept(prompt_text: str, chat: FactChat) -> bool:
    """Every current value of the asked fact is in the prompt."""
    return all(_found(v, prompt_text) for v in chat.asked.values)


def newest_shown(prompt_text: str, chat: FactChat, fact: PlantedFact | None = None) -> bool:
    """The values the correction brought are in the prompt (a fact never corrected: all its values)."""
    fact = fact or chat.asked
    new = [v for v in fact.values if v not in fact.old_values] if fact.correction else fact.values
    return all(_found(v, prompt_text) for v in new)


def older_as_current(prompt_text: str, chat: FactChat, fact: PlantedFact | None = None) -> bool:
    """The first statement of a corrected fact shown as if it held (the definition of the module docstring)."""
    fact = fact or chat.asked
    if not fact.correction:
        return False
    for m in re.finditer(re.escape(fact.stated), prompt_text):
        line_start = prompt_text.rfind("\n", 0, m.start()) + 1
        if "superseded" in prompt_text[line_start:m.start()]:
            continue
        if fact.correction not in prompt_text[m.end():]:
            return True
    return False
