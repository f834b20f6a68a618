"""The floor: what several stages of contextkit share, and nothing else.

Every package may import from here; this package imports nothing of contextkit outside
itself (``tests/test_architecture.py`` holds it to that), so nothing here can close a circle.
A name belongs here when two stages that do not import each other both need it; a name one
stage owns stays in that stage.

* :mod:`~contextkit.core.errors`: ``ContextkitError`` and every public error class;
* :mod:`~contextkit.core.records`: the records the stages pass along (``Document``, ``Chunk``,
  ``ScoredChunk``, ``Message``, ``EvidenceItem``);
* :mod:`~contextkit.core.tokenizers`: tokenizers found offline, and the default model's name;
* :mod:`~contextkit.core.text`: the one sentence splitter, ``truncate_at_sentence`` and the
  ``Deduplicator`` (evidence pruning and the assembler);
* :mod:`~contextkit.core.profiles`: model profiles (a window, a tokenizer, a price): the
  assembler budgets with them, an LLM call prices with them;
* :mod:`~contextkit.core.telemetry`: OpenTelemetry spans and metrics, a no-op without
  ``opentelemetry-api`` (ingestion, retrieval, assembly and LLM calls each open spans);
* :mod:`~contextkit.core.atomic`: the one atomic file writer;
* :mod:`~contextkit.core.files`: the kind of a file that is not a regular one, in words (loaders and index);
* :mod:`~contextkit.core.config`, :mod:`~contextkit.core.options`, :mod:`~contextkit.core.settings`:
  ``contextkit.toml`` and the settings base every component's options are declared on;
* :mod:`~contextkit.core.lazy`: the lazy-export helper of the packages' ``__init__``.

Their old homes (``contextkit.errors``, ``contextkit.records``, ``contextkit.tokenizers``,
``contextkit.text``, ``contextkit.config``, ``contextkit.assembly.profiles``,
``contextkit.llm.telemetry``) stay importable for users; contextkit's own code imports from here. Nothing is imported by this
``__init__``: each module loads when it is used.
"""
