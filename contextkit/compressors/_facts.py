"""Which older statements a newer one supersedes: "the dose is 5 ml" ... "the doctor changed it, 7.5 ml now".

Users correct themselves; a summary that shows the older statement as if it were current
misleads more than one that leaves it out. This module finds such pairs deterministically,
sentence by sentence (the sentences of :func:`contextkit.core.text.split_sentences`, so an
``ordinal`` here is the ordinal :class:`~contextkit.compressors.history.HistorySummarizer` uses).

A sentence (or a clause of a chat run-on, "... as the players Our hotel room is 438": cut before a
capitalised opener such as "My", "Our", "I", "Sorry") is a **statement** when it carries a value:
an e-mail address, a date ("March 3", "2 August 2027", "Friday", "the 21st"), a time ("6:45 am",
"14:30"), a number or an identifier ("7.5 ml", "$1,850", "42A", "B-17") or a capitalised name that
does not open it ("Oliver", "Maple Avenue", "KLM"). What is left once values are taken out is its
**frame**: the content words (stop words and correction cues left out, plural and past endings
stripped), what the statement is about. A question states nothing.

A newer sentence (said by the user; :data:`SPEAKERS`) supersedes an older one (said by anyone: the
assistant may have echoed the old value) when all of these hold:

1. their frames share a word, and what they are about (the frame, plus the names both carry:
   "Oliver", "Maple Avenue") overlaps, Jaccard at least :data:`SAME_FRAME` (0.5), or
   :data:`SAME_FRAME_CUED` (0.25) when the newer sentence has a correction cue ("actually",
   "changed", "moved", "instead", "correction", "sorry", "rescheduled", "switched", "not X but Y"
   ...): the same fact. "Now" ("the review is at 9:15 am now", "the deposit is 4,000 euro now") is a
   cue when the older statement lacks it (not "by now", "until now", "now that"): the state changed;
   two statements that both say "now" ("the docs are at ... now") are news both times. Without a
   cue, one of the two must be about the user's own things ("my", "our", "your"): other statements
   may be events or instances, both true ("we upgraded from 2.7 to 3.12" ... "from 3.12 to 3.13");
2. they are not about different people: when both name someone of :data:`PEOPLE` (son,
   daughter, mum, wife, dog ...), the two sets meet ("my son's dose is 5 ml" and "my daughter's
   dose is 2 ml" are two facts); and when both carry names, none in common, and more than the
   names differ, a correction cue is needed (two children with two doses, otherwise);
3. the newer one states a value the older lacks, of a kind (number, date, time, name, e-mail) that
   it replaces: a value of the same kind that the older one has and the newer one does not, or,
   with a cue, any value of that kind the older one has ("7.5 ml, not 5 ml" repeats the old one).
   A restatement with the same values supersedes nothing, nor does a newer statement that only
   adds a value of a new kind ("my flight is on March 3" then "it leaves at 6 pm").

A sentence is later when its turn is later, or it comes later in the same turn. Every pair is
checked (those sharing a frame word or a name, found through an index), so the rule looks at all the
turns given, and at ``newer`` turns that are not being summarised (a session's verbatim recent
turns). Known limits: a correction that does not name what it corrects ("sorry, 7.5 ml now")
has no frame in common with the fact and is not found; values written in lower case with no
digit ("allergic to peanuts", "by email") are words of the frame, not values; the cue is the whole
sentence's, so chit-chat with "actually" in it lowers the bar too. On real chit-chat (Topical-Chat
conversations 0-99 as one 2,174-turn chat) 25 sentences are taken as superseded, mostly restated
trivia ("the 1960s" ... "1960's", "222-0" ... "220-0"): a missed correction costs more than a
dropped line of chit-chat, so the bar stays where the tune split's corrections need it.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from contextkit.compressors._history_score import terms
from contextkit.core.text import split_sentences

__all__ = ["PEOPLE", "SAME_FRAME", "SAME_FRAME_CUED", "SPEAKERS", "Statement", "clauses", "correction_cue", "same_fact",
           "statements", "superseded", "superseded_sentences", "values"]

#: Frame overlap (Jaccard) that makes two statements one fact; lower when the newer has a correction cue.
SAME_FRAME, SAME_FRAME_CUED = 0.5, 0.25
#: Who can supersede: a correction is the user's. (The older statement may be anyone's.)
SPEAKERS = frozenset({"user"})
#: Words naming whom a fact is about; two statements naming disjoint sets of them are two facts.
PEOPLE = frozenset(
    "son daughter kid child boy girl baby twin youngest eldest oldest mum mom mother dad father parent wife "
    "husband partner sister brother grandma grandmother grandpa grandfather aunt uncle cousin niece nephew friend "
    "boss colleague neighbour neighbor dog cat puppy kitten pet".split())

_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?"
          r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_WEEKDAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)day"
_VALUE = re.compile(
    r"(?P<email>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)"
    rf"|(?P<date>\b(?:\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH}\b(?:,?\s+\d{{4}})?"
    rf"|{_MONTH}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}})?|{_WEEKDAY}s?\b"
    r"|the\s+\d{1,2}(?:st|nd|rd|th)\b))"
    r"|(?P<time>\b\d{1,2}(?::\d{2})?\s?(?:am|pm|a\.m\.|p\.m\.)(?!\w)|\b\d{1,2}:\d{2}\b)"
    r"|(?P<number>[$€£]?\d(?:[\w.,/:-]*\w)?)"
    r"|(?P<name>\b[A-Z][\w'’-]*)", re.I)
_CASED_NAME = re.compile(r"[A-Z]")
_TITLES = frozenset({"dr", "mr", "mrs", "ms", "prof", "i", "i'm", "i've", "i'd", "i'll", "ok", "okay"})
_CUE = re.compile(
    r"\b(?:actually|change[ds]?|changing|moved?|moving|instead|correction|correct(?:ed)?|sorry|update[ds]?|"
    r"reschedul\w*|switch(?:ed|ing)?|no longer|anymore|turns out|scratch that|i meant|mistake|wrong|"
    r"misremember\w*|mixed (?:that|it) up|revis\w*|adjust\w*|reassign\w*|raised|lowered|increased|reduced|"
    r"upped|postponed|pushed back|bumped|renegotiat\w*|reset|rethink|rethought|reconsider\w*|"
    r"on second thought|from now on)\b|\bnot\b[^.;]{0,40}\bbut\b", re.I)
#: "... 9:15 am now", "it's 4,000 euro now": the state has changed since an earlier statement. Not "by now",
#: "until now", "just now", "now that", "now and then"; and not when the older statement says "now" too
#: ("the docs are at ... now" twice: news both times, see :func:`same_fact`).
_NOW = re.compile(r"(?<!\bby )(?<!\buntil )(?<!\btill )(?<!\bto )(?<!\bjust )(?<!\bevery )\bnow\b(?! that\b)(?! and then\b)",
                  re.I)
_OPENERS = ("My|Our|I|I'm|I've|I'd|We|We're|We've|They|The|Sorry|Oh|Actually|Correction|Update|Quick|Please|"
            "Also|But|So|And|He|She|It|It's|This|That|There|Ugh|Small|Change|Just|Anyway|Btw|By")
_RUN_ON = re.compile(rf"(?<=[a-z0-9]) (?=(?:{_OPENERS})\b)")
_PRONOUN = re.compile(r"(?:i|you|we|they|he|she|it|that|there|what|who)['’]")
_OWN = re.compile(r"\b(?:my|our|mine|ours|your|yours)\b", re.I)
_ABOUT_THE_USER = re.compile(r"\b(?:your|yours|you['’]re|you have|you take)\b", re.I)
_NOT_FRAME = frozenset(
    "actually change changed changes changing now move moved moving instead correction correct corrected sorry "
    "update updated updates switch switched switching longer anymore turns meant mistake wrong raised lowered "
    "increased reduced upped postponed bumped reset".split()) | {"am", "get", "got", "one", "good", "great", "cool",
                                                                 "pretty", "lot", "bit", "quite", "still", "even"}


def _stem(word: str) -> str:
    """A light stemmer for frames: "takes"/"take"/"taking", "lands"/"landed", "hours"/"hour" meet."""
    word = re.sub(r"['’]s$", "", word)
    for end in ("ing", "ed", "s"):
        if word.endswith(end) and len(word) - len(end) >= 3:
            word = word[: -len(end)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def _norm(value: str) -> str:
    value = value.lower().strip(".,;:!?'\"’")
    value = re.sub(r"['’]s$", "", value)
    return re.sub(r"(?<=\d),(?=\d{3})|^[$€£]|\s+", lambda m: " " if m.group().isspace() else "", value)


def values(text: str) -> list[tuple[str, str]]:
    """The values ``text`` states, as ``(kind, normalised value)`` in order: e-mail, date, time,
    number (any token with a digit) and name (a capitalised word that does not open ``text``)."""
    out: list[tuple[str, str]] = []
    opener = re.match(r"[\W_]*", text)
    first = opener.end() if opener else 0
    for m in _VALUE.finditer(text):
        kind = m.lastgroup or "number"
        if kind == "name":
            word = _norm(m.group())
            if m.start() == first or not _CASED_NAME.match(m.group()) or word in _TITLES:
                continue
            out.append(("number" if any(c.isdigit() for c in word) else "name", word))
        else:
            out.append((kind, _norm(m.group())))
    return out


def correction_cue(text: str) -> bool:
    """Whether ``text`` reads as a correction ("actually", "changed", "moved", "not X but Y" ...); "now"
    is weighed against the older statement (:func:`same_fact`), not here."""
    return bool(_CUE.search(text))


@dataclass(frozen=True, slots=True)
class Statement:
    """A sentence with values: where it is, what it is about (``frame``) and what it says (``values``)."""

    turn: int
    ordinal: int
    role: str
    frame: frozenset[str]
    values: frozenset[tuple[str, str]]
    people: frozenset[str]
    cue: bool
    own: bool = False  # "my", "our", "your": about the user's own things
    now: bool = False  # "... now": a state that changed (a cue where the older statement lacks it)


def clauses(sentence: str) -> list[str]:
    """``sentence`` cut where chat run-ons join two sentences with no stop ("the same restaurant as the
    players Our hotel room is 438"): before a capitalised opener (``_OPENERS``) after a lower-case
    word. The summarizer keeps or drops the whole sentence; the cut only keeps frames apart."""
    return [c for c in _RUN_ON.split(sentence) if c.strip()]


def statements(text: str, role: str, turn: int = 0) -> list[Statement]:
    """The statements of one message: its sentences' clauses that carry a value, with their frames."""
    out = []
    for ordinal, (a, b) in enumerate(split_sentences(text)):
        cue = correction_cue(text[a:b])  # the sentence's: "Actually I take 15 mg" cuts before "I"
        now = bool(_NOW.search(text[a:b]))
        for clause in clauses(text[a:b]):
            found = values(clause)
            if not found or clause.rstrip(" )\"'’”").endswith("?"):  # a question states nothing
                continue
            if role not in SPEAKERS and not _ABOUT_THE_USER.search(clause):
                continue
            out.append(Statement(turn, ordinal, role, _frame(clause, found), frozenset(found), frozenset(),
                                 cue, bool(_OWN.search(clause)), now))
    return [replace(s, people=s.frame & PEOPLE) for s in out]


def _frame(clause: str, found: list[tuple[str, str]]) -> frozenset[str]:
    """The content words of ``clause`` less its values, cues, titles and pronoun contractions, stemmed."""
    value_words = {w for _, v in found for w in re.findall(r"[^\W_]+", v)}
    words = {re.sub(r"['’]s$", "", w) for w in terms(clause)}
    return frozenset(_stem(w) for w in words if w not in value_words and w not in _NOT_FRAME and w not in _TITLES
                     and terms(w) and not _PRONOUN.match(w) and not any(c.isdigit() for c in w))


def same_fact(old: Statement, new: Statement) -> bool:
    """Whether ``new`` restates the fact of ``old`` with a different value (the rule of the module docstring)."""
    old_names = {v for k, v in old.values if k == "name"}
    new_names = {v for k, v in new.values if k == "name"}
    both = old_names & new_names  # a name both say ("Oliver", "Maple Avenue") is part of what they are about
    about_old, about_new = old.frame | both, new.frame | both
    shared = about_old & about_new
    cue = new.cue or (new.now and not old.now)  # "it's at 9:15 am now" after a statement without "now"
    if not old.frame & new.frame or len(shared) / len(about_old | about_new) < (SAME_FRAME_CUED if cue else SAME_FRAME):
        return False
    if not cue and not (old.own or new.own):  # "we upgraded from 2.7 to 3.12" ... "from 3.12 to 3.13"
        return False
    if old.people and new.people and not old.people & new.people:
        return False
    added, dropped = new.values - old.values, old.values - new.values
    if not added:
        return False
    replaced = {k for k, _ in dropped} if dropped else ({k for k, _ in old.values} if cue else set())
    if not {k for k, _ in added} & replaced:
        return False
    if old_names and new_names and not old_names & new_names and not cue:
        return {k for k, _ in added} == {"name"}  # only the name changed: a renamed fact; else two people
    return True


def _later(a: Statement, b: Statement) -> bool:
    return (b.turn, b.ordinal) > (a.turn, a.ordinal)


def _keys(s: Statement) -> set[str]:
    """What a statement is indexed by: its frame words and its names (all a pair can share)."""
    return set(s.frame) | {v for k, v in s.values if k == "name"}


#: The newest statements sharing a (word, kind of value) key that a new statement is compared with.
#: Why a cap: a history of 10,000 turns that all say "turn N" made 49 million comparisons (190 s);
#: a fact corrected after more than this many later statements of the same word and kind keeps both.
CANDIDATES_PER_KEY = 256


def _supersede(found: Iterable[Statement]) -> dict[tuple[int, int], int]:
    """(turn, ordinal) of each superseded statement -> the newest turn that supersedes it. Only pairs
    that can match are compared: both carry values, and they share a frame word or a name together with
    a kind of value (the newer must replace a value of a kind the older has), through an index; a new
    statement with no cue ("actually", "now") and not about the user's own things can only supersede one
    that is (:func:`same_fact`), so it looks in the index of those alone; at most
    :data:`CANDIDATES_PER_KEY` of the newest per key."""
    ordered = sorted((s for s in found if s.values), key=lambda s: (s.turn, s.ordinal))
    def newest() -> deque[int]:
        return deque(maxlen=CANDIDATES_PER_KEY)

    by_key: defaultdict[tuple[str, str], deque[int]] = defaultdict(newest)
    own_by_key: defaultdict[tuple[str, str], deque[int]] = defaultdict(newest)
    out: dict[tuple[int, int], int] = {}
    for j, new in enumerate(ordered):
        keys = {(w, kind) for w in _keys(new) for kind, _ in new.values}
        if new.role in SPEAKERS:
            index = by_key if new.cue or new.now or new.own else own_by_key
            for i in sorted({i for key in keys if key in index for i in index[key]}):
                old = ordered[i]
                if _later(old, new) and same_fact(old, new):
                    out[(old.turn, old.ordinal)] = max(new.turn, out.get((old.turn, old.ordinal), -1))
        for key in keys:
            by_key[key].append(j)
            if new.own:
                own_by_key[key].append(j)
    return out


def _role_content(message: Any) -> tuple[str, str]:
    if isinstance(message, dict):
        return str(message.get("role", "")), str(message.get("content", ""))
    return str(message.role), str(message.content)


def superseded_sentences(messages: Sequence[Any], newer: Sequence[Any] = (), *,
                         cache: MutableMapping[tuple[str, str], list[Statement]] | None = None,
                         ) -> dict[tuple[int, int], int]:
    """``(turn, sentence ordinal)`` of each sentence of ``messages`` that a later sentence supersedes,
    mapped to the newest superseding turn. Turns of ``newer`` (later turns not being summarised) count
    from ``len(messages)``; their own superseded sentences are left out of the answer. ``cache`` keeps
    each message's statements (a summarizer's rolling cache: a new turn costs its own sentences)."""
    found: list[Statement] = []
    for turn, message in enumerate([*messages, *newer]):
        key = _role_content(message)
        said = cache.get(key) if cache is not None else None
        if said is None:
            said = statements(key[1], key[0])
            if cache is not None:
                cache[key] = said
        found.extend(replace(s, turn=turn) for s in said)
    return {k: v for k, v in _supersede(found).items() if k[0] < len(messages)}


def superseded(messages: Sequence[Any], newer: Sequence[Any] = ()) -> dict[int, int]:
    """Older turn -> the newest turn that restates one of its facts with another value (turns of
    ``newer`` numbered from ``len(messages)``). Messages are :class:`Message` or role/content dicts."""
    out: dict[int, int] = {}
    for (turn, _), by in sorted(superseded_sentences(messages, newer).items()):
        out[turn] = max(by, out.get(turn, -1))
    return out
