"""A session keeps the user's facts across compactions, shows the newest value, and recalls only what bears on the question.

The chat is chit-chat full of numbers and names (the kind that fools a "has a number" cue), with a
dose the user states early and corrects many turns later, in other words than the question uses.
The budget forces compactions, so both statements end up condensed. Recall is by meaning with the
real default model (all-MiniLM-L6-v2, shipped with the test environment).
"""

from __future__ import annotations

import re

import pytest

from contextkit.compressors.history import HistorySummarizer
from contextkit.records import Message
from contextkit.session import Session

TALK = [
    ("user", "Did you watch the match last night? Arsenal won 3-1 at home and the second goal came late."),
    ("assistant", "Yes, the second goal came in the 78th minute, after a long spell of pressure from the left."),
    ("user", "The 1966 World Cup final drew 96,924 people to Wembley, which still amazes me."),
    ("assistant", "That is a huge crowd, even by today's standards; the old stadium held more standing fans."),
    ("user", "Have you seen the new Villeneuve film? It runs for 166 minutes and the desert scenes are huge."),
    ("assistant", "I liked the sound design, though the middle drags a bit and the score is very loud."),
    ("user", "Serena Williams won 23 Grand Slam singles titles over her career."),
    ("assistant", "She also won 14 doubles titles with her sister Venus, a record of its own."),
    ("user", "The Tour de France covered 3,404 kilometres this year, with four summit finishes."),
    ("assistant", "The riders climbed more than 50,000 metres in total, and the winner lost 4 kilograms."),
]
DOSE = "By the way, my daughter Mia takes 5 ml of cetirizine for her hay fever at 7 pm."
DOSE_FIX = "Update on Mia: the paediatrician raised it to 7.5 ml of cetirizine, still at 7 pm."
ASKED = "How much of the allergy medicine should my little girl get tonight?"
UNRELATED = "What is the capital of Mongolia?"


def _chat(session: Session, turns: int, plants: dict[int, str]) -> None:
    for i in range(turns):
        role, text = TALK[i % len(TALK)]
        if i in plants:
            text = f"{text} {plants[i]}"
        if role == "user":
            session.prompt(text)
        else:
            session.add({"role": "assistant", "content": text})


def _sections(text: str, tag: str) -> str:
    found = re.search(rf"(?s)<{tag}>(.*?)</{tag}>", text)
    return found.group(1) if found else ""


def _request(session: Session, question: str) -> str:
    return "\n".join(str(m.get("content") or "") for m in session.prompt(question).messages("openai"))


@pytest.fixture(scope="module")
def corrected() -> Session:
    session = Session(3_000, instructions="Answer from what the user told you.", chat="openai")
    _chat(session, 240, {2: DOSE, 80: DOSE_FIX})
    assert session.compactions >= 2 and len(session.compacted) > 82  # both statements were condensed
    return session


def test_a_corrected_fact_asked_in_other_words_shows_the_newest_value(corrected: Session) -> None:
    text = _request(corrected, ASKED)
    assert "7.5 ml" in text
    assert "5 ml of cetirizine" not in text.replace("7.5 ml of cetirizine", "")  # the older value never as current


def test_a_question_about_nothing_said_before_recalls_nothing(corrected: Session) -> None:
    text = _request(corrected, UNRELATED)
    assert "<recalled_turns>" not in text


def test_recall_does_not_repeat_what_the_summaries_show(corrected: Session) -> None:
    text = _request(corrected, "How long was that Villeneuve film, and how many titles did Serena win?")
    recalled = _sections(text, "recalled_turns")
    summaries = _sections(text, "earlier_turns")
    assert recalled, "the question names things said before"
    for line in recalled.strip().splitlines():
        body = line.split(": ", 1)[1]
        for piece in body.split(" … "):
            assert piece.strip() not in summaries, piece


def test_summarizer_min_similarity_leaves_out_the_unrelated() -> None:
    turns = [Message(*TALK[i % len(TALK)]) for i in range(20)]
    turns[4] = Message("user", f"{turns[4].content} {DOSE}")
    gated = HistorySummarizer(model="default", min_similarity=0.2)
    assert gated.summarize(turns, UNRELATED, max_tokens=200) == ""
    assert "5 ml" in gated.summarize(turns, ASKED, max_tokens=60)
    assert HistorySummarizer(model="default").summarize(turns, UNRELATED, max_tokens=200)  # no floor: fills


def test_summarizer_shown_sentences_are_not_repeated() -> None:
    turns = [Message(*TALK[i % len(TALK)]) for i in range(10)]
    summarizer = HistorySummarizer()
    first = summarizer.summarize(turns, "Wembley crowd", max_tokens=60)
    again = summarizer.summarize(turns, "Wembley crowd", max_tokens=60, shown=first)
    assert "96,924" in first and "96,924" not in again


def test_sessions_share_one_loaded_model() -> None:
    one, two = HistorySummarizer(model="default"), HistorySummarizer(model="default")
    assert one.embedder is two.embedder


@pytest.mark.parametrize(("model", "floor"), [("default", 0.2), ("all-MiniLM-L6-v2", 0.2),
                                              ("BAAI/bge-small-en-v1.5", None)])
def test_the_recall_floor_is_the_default_models_only(model: str, floor: float | None) -> None:
    """Cosines of another model have another scale (e5's unrelated pairs score 0.7): no floor is guessed for
    it; an index built with MiniLM under its short name gets MiniLM's."""
    from contextkit.embedders import Embedder

    session = Session(3_000)
    session._embedder = Embedder(model)  # what an index's retriever hands a session (nothing is loaded here)
    assert session._recall_floor() == floor
    assert Session(3_000, recall_min_similarity=0.4)._recall_floor() == 0.4
