"""History summaries keep a fact about the user when the question asks for it in other words (issue 29).

The chat is written here: 70 turns of talk about sport, films and music full of numbers and
names, with three facts the user states about themselves early on. The questions share no
content word with the fact they ask for.
"""

from __future__ import annotations

import pytest

from contextkit.compressors.history import GAP, HistorySummarizer
from contextkit.records import Message

USER_TALK = [
    "Did you watch the match last night? Arsenal won 3-1 at home.",
    "I read that the 1966 World Cup final drew 96,924 people to Wembley.",
    "Apparently Georgia Tech once beat Cumberland 222-0 in 1916, which is wild.",
    "Have you seen the new Villeneuve film? It runs for 166 minutes.",
    "My favourite album of the 90s is probably OK Computer.",
    "The Tour de France covered 3,404 kilometres this year.",
    "I think basketball is more fun to watch than baseball.",
    "Did you know the Eiffel Tower grows about 15 cm in summer?",
    "The Beatles recorded Abbey Road in 1969, right?",
    "Serena Williams won 23 Grand Slam singles titles.",
    "Honestly, I could watch nature documentaries all day.",
    "The marathon record is now under 2 hours and 1 minute.",
]
ASSISTANT_TALK = [
    "Yes, and the second goal came in the 78th minute.",
    "That is a huge crowd, even by today's standards.",
    "That score still stands as the most lopsided in college football.",
    "I liked the sound design, though the middle drags a bit.",
    "Good choice; Radiohead released it in 1997.",
    "The riders climbed more than 50,000 metres in total.",
    "Fair enough, the pace is faster and there are more points.",
    "Thermal expansion of the iron does that, yes.",
    "Yes, and it was the last album they recorded together.",
    "She also won 14 doubles titles with her sister Venus.",
    "Planet Earth II has some stunning episodes on islands.",
    "Kelvin Kiptum ran 2:00:35 in Chicago in 2023.",
]
FACT = "My dad takes 20 mg of atorvastatin at 9 pm."
OTHER_FACTS = {5: "Our flight to Lima leaves at 6:40 am on the 14th.", 9: "We set aside 1,400 dollars for the new sofa."}
QUESTION = "How much of his cholesterol pill does my father have, and when?"


def seventy_turns() -> list[Message]:
    """35 exchanges of chit-chat; the user's own facts in turns 3, 5 and 9 (0-based)."""
    msgs = []
    for i in range(35):
        user = f"{USER_TALK[i % 12]} {USER_TALK[(i * 5 + 7) % 12]}" if i >= 12 else USER_TALK[i]
        msgs.append(Message("user", user, id=f"u{i}"))
        msgs.append(Message("assistant", ASSISTANT_TALK[(i * 7) % 12], id=f"a{i}"))
    msgs[3] = Message("user", f"{msgs[3].content} {FACT}", id="u-fact")
    for turn, said in OTHER_FACTS.items():
        msgs[turn] = Message(msgs[turn].role, f"{msgs[turn].content} {said}", id=msgs[turn].id)
    return msgs


def pieces_are_verbatim(summary: str, older: list[Message]) -> None:
    for line in summary.splitlines()[1:]:
        head, _, body = line.partition(": ")
        turn = int(head.split("]")[0].removeprefix("- [turn ")) - 1
        for piece in body.split(GAP):
            assert piece in older[turn].content, (turn, piece)


def at_ratio(summarizer: HistorySummarizer, msgs: list[Message], question: str, ratio: int, cl100k):
    """The bench's recipe: the newest turns up to half of 1/ratio of the tokens, the summary in the rest."""
    budget = sum(cl100k.count(m.content) for m in msgs) // ratio
    keep, used = 0, 0
    for m in reversed(msgs):
        if used + cl100k.count(m.content) > budget // 2:
            break
        keep, used = keep + 1, used + cl100k.count(m.content)
    return summarizer.compress(msgs, question, keep_last=keep, max_tokens=budget - used), budget


class TestFactAskedInOtherWords:
    def test_seventy_turns_keep_the_fact_at_4x(self, embedder, cl100k):
        msgs = seventy_turns()
        result, budget = at_ratio(HistorySummarizer(embedder=embedder), msgs, QUESTION, 4, cl100k)
        assert FACT in result.summary  # whole: the dose and the time
        assert result.report.output_tokens <= budget and result.report.details["relevance"] == "lexical+dense"
        pieces_are_verbatim(result.summary, result.summarized)

    def test_a_chit_chat_number_does_not_beat_the_asked_fact(self, embedder):
        # Room for about one line: the fact must be the line, not the 222-0 score or another number.
        summary = HistorySummarizer(embedder=embedder, keep_last=0, summary_max_tokens=40).summarize(
            seventy_turns(), QUESTION)
        assert summary.splitlines()[1:] == [f"- [turn 4] user: {FACT}"]

    def test_the_other_facts_are_found_by_meaning_too(self, embedder):
        summarizer = HistorySummarizer(embedder=embedder, keep_last=0, summary_max_tokens=40)
        for question, said in (("When does our plane take off for Peru?", OTHER_FACTS[5]),
                               ("How much can we spend on the couch?", OTHER_FACTS[9])):
            assert said in summarizer.summarize(seventy_turns(), question)

    def test_each_message_is_embedded_once(self, embedder):
        summarizer = HistorySummarizer(embedder=embedder, keep_last=0, summary_max_tokens=60)
        msgs = seventy_turns()
        summarizer.compress(msgs, QUESTION)
        new = Message("user", "One more thing about the sofa. It should be dark green.")
        summarizer.compress([*msgs, new], "Which sofa colour?")
        assert embedder.last_report.texts == 1 + 2  # the question and the new turn's two sentences


class TestWithoutAnEmbedder:
    def test_lexical_relevance_still_keeps_a_fact_asked_with_its_words(self):
        msgs = seventy_turns()
        result = HistorySummarizer(keep_last=6, summary_max_tokens=60).compress(msgs, "How much atorvastatin?")
        assert FACT in result.summary and result.report.details["relevance"] == "lexical"
        assert result.report.fallback is None
        pieces_are_verbatim(result.summary, result.summarized)

    def test_a_model_that_cannot_load_falls_back_and_says_so(self, caplog):
        summarizer = HistorySummarizer(model="/nonexistent/model-for-history", keep_last=6, summary_max_tokens=60)
        result = summarizer.compress(seventy_turns(), "How much atorvastatin?")
        assert FACT in result.summary and result.report.details["relevance"] == "lexical"
        assert "not loaded" in result.report.fallback and "lexical relevance" in result.report.fallback
        assert summarizer.compress(seventy_turns(), "atorvastatin").report.fallback  # every report says it

    def test_without_a_question_the_users_own_statements_come_first(self):
        summary = HistorySummarizer(keep_last=0, summary_max_tokens=60).summarize(seventy_turns())
        lines = summary.splitlines()[1:]
        assert f"- [turn 4] user: {FACT}" in lines  # before the late chit-chat that recency favoured
        assert all(line.split("] ", 1)[1].startswith(("user: My ", "user: Our ")) for line in lines), lines

    def test_round_trip_keeps_the_model_name(self, embedder):
        s = HistorySummarizer(embedder=embedder, keep_last=3)
        again = HistorySummarizer.from_dict(s.to_dict(), embedder=embedder)
        assert again.to_dict() == s.to_dict() and s.to_dict()["model"] == embedder.model_name
        assert HistorySummarizer().to_dict()["model"] is None  # no model unless asked: offline and fast


@pytest.mark.parametrize("ratio", [4, 10])
def test_summaries_stay_verbatim_with_an_embedder(embedder, cl100k, ratio):
    msgs = seventy_turns()
    result, _ = at_ratio(HistorySummarizer(embedder=embedder), msgs, QUESTION, ratio, cl100k)
    assert result.summary
    pieces_are_verbatim(result.summary, result.summarized)


def test_the_assembler_hands_the_index_embedder_to_the_summarizer(tmp_path, small_corpus, embedder):
    from contextkit.assembly.context_assembler import ContextAssembler
    from contextkit.index import Index
    from contextkit.ingestion import ingest
    from contextkit.retrievers import HybridRetriever

    ingest([small_corpus], tmp_path / "ix", embedder=embedder)
    with Index.open(tmp_path / "ix", read_only=True) as index:
        assembler = ContextAssembler(700, retriever=HybridRetriever(index, embedder))
        prompt, report = assembler.assemble(QUESTION, history=seventy_turns())
    assert assembler._extractive is not None and assembler._extractive.embedder is embedder
    assert "atorvastatin at 9 pm" in prompt
    assert report.compression[-1].details["relevance"] == "lexical+dense"
