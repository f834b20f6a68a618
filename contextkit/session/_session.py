"""``Session``: a :class:`~contextkit.assembly.conversation.Conversation` whose tail comes from a
``ContextAssembler`` over an index or a retriever (evidence for each question, the relevance gate,
escaping and the report of every prompt).

    session = Session("gpt-4o", instructions="Answer from the documents.", index="docs.ck-index")
    result = session.prompt("How do I pin a dependency?")
    reply = client.chat.completions.create(model="gpt-4o", messages=result.messages("openai"))
    session.add(reply.choices[0].message.model_dump())
"""

from __future__ import annotations

from typing import Any

from contextkit.assembly.budget import AssemblyResult
from contextkit.assembly.context_assembler import ContextAssembler
from contextkit.assembly.conversation import Conversation, ConversationOptions, ConversationResult
from contextkit.assembly.sections import Section
from contextkit.core.profiles import ModelProfile

__all__ = ["Session", "SessionOptions", "SessionResult"]

#: The options of a session (declared once, on the conversation).
SessionOptions = ConversationOptions
SessionResult = ConversationResult


class Session(Conversation):
    """The context of one conversation or agent run (see :mod:`contextkit.assembly.conversation`).

    ``budget`` is a token count or a model profile (its prompt budget; its cache rule predicts the cached
    prefix). ``index`` (a folder or an opened index) or ``retriever`` brings evidence for each question;
    ``redactor`` (a :class:`~contextkit.compressors.redact.PIIRedactor`) masks personal data in every turn as it
    is recorded (so neither the requests nor a saved session hold it) and in each tail; the other keywords are
    :class:`SessionOptions`.
    """

    def __init__(self, budget: int | str | ModelProfile, *, instructions: str | None = None, index: Any = None,
                 retriever: Any = None, history_summarizer: Any = None, redactor: Any = None,
                 **options: Any) -> None:
        fields = SessionOptions.model_fields  # the defaults, declared once on the options
        markup, fmt, chat = (options.get(k, fields[k].default) for k in ("markup", "format", "chat"))
        self.assembler = ContextAssembler(budget, index=index, retriever=retriever, markup=markup, format=fmt,
                                          chat=chat, redactor=redactor)
        super().__init__(budget, tail=self._tail_of, instructions=instructions, redactor=redactor,
                         history_summarizer=history_summarizer, embedder=self._embedder_of(), **options)

    def _embedder_of(self) -> Any:
        retriever = self.assembler.retriever
        return getattr(retriever, "embedder", None) if retriever is not None else None

    def _tail_of(self, query: str | None, *, evidence: list[Any] | None, tool_results: Any,
                 sections: list[Section], budget: int) -> AssemblyResult:
        k = self.options.k if self.assembler.retriever is not None else None
        return self.assembler.assemble(query, evidence=evidence, tool_results=tool_results, sections=sections,
                                       budget=budget, k=k, restate_instructions=False)

    def close(self) -> None:
        """Close the index the session opened (a folder given as ``index``)."""
        self.assembler.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
