"""Masking personal data and secrets before text enters a prompt or an index.

``PIIRedactor`` finds ten kinds of values and replaces each with a placeholder
``<KIND_N>`` (NAME and ADDRESS only with an NER backend the user passes):

=======  ================================================================
kind     what
=======  ================================================================
EMAIL    e-mail addresses (``local@domain.tld``, Unicode letters allowed)
PHONE    numbers found by libphonenumber (``phonenumbers``) over the regions named in
         ``phone_regions`` (default: 36, see :mod:`._pii_phone`), international ones
         whatever the regions, with extensions (``(590)550-7590x631``)
CARD     payment card numbers: 12-19 digits, spaces or dashes, a known IIN
         prefix and length (Visa, Mastercard, Amex, Discover, Diners, JCB,
         UnionPay, Maestro 12-19, Mir) and a valid Luhn check digit; not a
         barcode (after EAN/UPC/ISBN/order words, or GS1-valid and unseparated)
IBAN     country code, check digits and BBAN, the country's length, and
         the ISO 7064 mod-97 check; compact or in groups of four
IP       IPv4 (octets 0-255, no leading zeros) and IPv6 (checked by
         :mod:`ipaddress`)
SECRET   private-key PEM blocks; AWS access key ids, GitHub, GitLab, Slack,
         Stripe, OpenAI-style ``sk-``, Google ``AIza``, Hugging Face, npm and
         SendGrid, Twilio, Mailgun, Telegram ... tokens, JWTs, ``Bearer`` tokens;
         the value of ``password=`` / ``secret: `` / ``api_key=`` style
         assignments; passwords in connection URLs and in prose
         (:mod:`._pii_credentials`); and generic random-looking tokens
         (see :mod:`._pii_secrets`)
ID       national identifiers with their validity rules or checksums: US SSN
         and ITIN, UK NINO, Canadian SIN (Luhn), Indian Aadhaar (Verhoeff),
         German Steuer-ID (MOD 11,10), French NIR (mod-97 key), Spanish
         DNI/NIE (mod-23 letter), Italian codice fiscale (check letter); US
         driver's licences after a label (see :mod:`._pii_national` for
         which forms need a label)
DOB      a full date after a birth label ("DOB:", "date of birth", "born on",
         "né le", "geboren am" ...; :mod:`._pii_dob`)
NAME     people's names, from the NER backend (``ner=``, :mod:`._pii_ner`)
ADDRESS  street addresses and places, from the NER backend
=======  ================================================================

Why the placeholders look the way they do. The same value gets the same
placeholder for the life of the redactor (a *session*: one conversation, one
ingestion run), so a model still sees that two messages mention the same
address; ``reset()`` starts a new session. "The same" means the same
characters: ``4111 1111 1111 1111`` and ``4111-1111-1111-1111`` get two
placeholders, so that ``restore`` can give back exactly what was there. Values
are remembered only as BLAKE2b digests keyed with a per-session random salt:
without ``keep_mapping=True`` the redactor holds no original value after
``redact`` returns. With ``keep_mapping=True`` it keeps ``placeholder ->
original`` in memory, so ``restore()`` can put the originals back into, say, a
model's answer; that mapping is never written anywhere, never in
``to_dict()``, a report or a result, and the redactor refuses to be pickled.

Text that already contains a lookalike such as ``<EMAIL_1>`` is left as it
is. A lookalike whose number this session has not issued *reserves* that
number: our own placeholders skip it and ``restore`` never touches it, so
``restore(redact(x).text) == x`` for any ``x`` in a fresh session. A
lookalike equal to a placeholder the session has already issued is taken to
be ours coming back (a redacted history redacted again) and ``restore`` will
restore it; ``redact`` of already-redacted text changes nothing.

Overlaps: every detector proposes spans; the more specific wins (PEM block >
named key formats > EMAIL > IBAN > ID > CARD > DOB > IP > PHONE > secret assignment >
generic token > NAME and ADDRESS), then the longer, then the earlier; losers are dropped whole,
so placeholders never nest or cut each other. Once a value is found, every
other occurrence of it in the same text is masked too, even where its
context alone would not have triggered a detector (inside a longer number,
say), and no detected value contains ``<`` or ``>``, so a placeholder cannot
combine with its neighbours into one: a reported value never survives in the
output.

What is deliberately *not* redacted: plain years, dates (but a date of birth after its label), times, version
strings (``1.2.3.4.5``, ``v2.10.3``, and four-part ones after "version",
"release", ``>=``, "EC" and the like), ISBNs and long numeric ids without a
card structure, 16-digit numbers that fail Luhn, IBAN lookalikes with a bad
checksum, digit groups inside a longer run of groups (``4669 0923 4139
8847``, ``DE59 2344 8783 ...``: a card or phone number starts and ends its
run), the bare words "password" or "secret", key prefixes inside words
(``AKIAword``), assignments whose value is a stand-in (``<token>``,
``${TOKEN}``, ``xxxx``) or code (``password=user.password``). Known limits:
a bare ``1.2.3.4`` cannot be told from an IPv4 address and is masked; a code
identifier that mixes short words and digits (``_Py_python2js_track_proxies``)
can pass the generic detector; a phone number written as bare digits is found
only when it is a valid mobile or trunk-prefixed number (``5551234567`` is not),
and eight-digit Nordic numbers only in "12 34 56 78" shapes or after a phone word.

Fields around a text: :meth:`PIIRedactor.mask`, :meth:`~PIIRedactor.mask_id` and
:meth:`~PIIRedactor.mask_data` mask ids, sources and metadata in the same session
(ingestion and assembly use them; ``docs/redaction.md`` says what is masked where).

Where the code lives: this module holds the public classes, the session
(placeholders, the optional mapping, ``restore``) and the overlap resolution;
the detectors are private, in :mod:`contextkit.compressors._pii_detect`
(the shared text scan, EMAIL, CARD, IBAN, IP), :mod:`._pii_phone` (PHONE, by
libphonenumber), :mod:`._pii_national` (ID), :mod:`._pii_dob` (DOB), :mod:`._pii_ner` (NAME,
ADDRESS: the optional backend), :mod:`contextkit.compressors._pii_secrets` (SECRET: key formats,
assignments and the generic detector, with its design notes) and
:mod:`._pii_credentials` (URL and prose passwords, tokens found around a literal).

Speed: every pattern is compiled once at import and nothing scans the whole
text with a character class (see :mod:`._pii_detect`); costlier checks
(Luhn, mod-97, entropy, :mod:`ipaddress`, libphonenumber) run only on candidates.
A few tenths of a second per MB of English prose on a busy 2-core machine
(``bench/bench_redact.py`` measures it). A redactor is
not thread-safe: use one per session.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Self, TypedDict

from pydantic import Field, field_validator

from contextkit.compressors._pii_credentials import _find_credentials
from contextkit.compressors._pii_detect import (
    Candidate,
    _find_card,
    _find_email,
    _find_iban,
    _find_ip,
    _Scan,
)
from contextkit.compressors._pii_dob import find_dob
from contextkit.compressors._pii_national import find_ids
from contextkit.compressors._pii_ner import ner_backend, ner_finder
from contextkit.compressors._pii_phone import (
    DEFAULT_PHONE_REGIONS,
    phone_finder,
    validate_regions,
)
from contextkit.compressors._pii_secrets import (
    _find_assignments,
    _find_keys,
    _generic_finder,
)
from contextkit.compressors.base import CompressionReport, Redactor
from contextkit.core.errors import InvalidArgumentError, RestoreUnavailableError
from contextkit.core.settings import Settings

__all__ = [
    "KINDS",
    "PIIRedactor",
    "RedactedSpan",
    "RedactionResult",
    "RedactorConfig",
    "RestoreUnavailableError",
]

KINDS: tuple[str, ...] = ("EMAIL", "PHONE", "CARD", "IBAN", "IP", "SECRET", "ID", "DOB", "NAME", "ADDRESS")
#: The kinds only an NER backend finds (``PIIRedactor(ner=...)``); without one they find nothing.
NER_ONLY: frozenset[str] = frozenset({"NAME", "ADDRESS"})

_PLACEHOLDER = re.compile(rf"<({'|'.join(KINDS)})_([1-9]\d*)>")


# ------------------------------------------------------------------ records
class _Stats(TypedDict):
    """A session's running totals, for :meth:`PIIRedactor.report`."""

    texts: int
    chars_in: int
    chars_out: int
    seconds: float


@dataclass(frozen=True, slots=True)
class RedactedSpan:
    """Where a value was, in the ORIGINAL text, and what replaced it; never the value itself."""

    start: int
    end: int
    kind: str
    placeholder: str
    detector: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class RedactionResult:
    """One redacted text: the output, how many spans of each kind, and the spans (sorted)."""

    text: str
    counts: dict[str, int]
    spans: tuple[RedactedSpan, ...] = ()
    chars_in: int = field(default=0, compare=False, repr=False)
    seconds: float = field(default=0.0, compare=False, repr=False)

    @property
    def changed(self) -> bool:
        return bool(self.spans)

    @property
    def report(self) -> CompressionReport:
        """This text's report, in the shape every compressor's result carries (counts only, no values).

        Built when asked for: redaction runs once per chunk on the ingestion path.
        :meth:`PIIRedactor.report` sums a whole session.
        """
        return CompressionReport(
            compressor=PIIRedactor.name, items_in=1, items_out=1, removed=dict(self.counts), seconds=self.seconds,
            details={"chars_in": self.chars_in, "chars_out": len(self.text), "tokens_counted": False})

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "counts": dict(self.counts), "spans": [s.to_dict() for s in self.spans]}


class RedactorConfig(Settings):
    """What ``to_dict()`` / ``from_dict()`` carry: configuration only, never session state."""

    kinds: tuple[str, ...] = Field(default=KINDS, description="which kinds to redact")
    entropy_threshold: float = Field(default=3.3, ge=0.0, le=8.0,
                                     description="bits per character a generic secret token needs")
    keep_mapping: bool = Field(default=False, description="keep placeholder -> original in memory for restore()")
    phone_regions: tuple[str, ...] = Field(default=DEFAULT_PHONE_REGIONS,
                                           description="ISO 3166 regions whose national phone formats are matched, "
                                                       "first first; international +CC numbers are always matched")
    ner: str | None = Field(default=None, description="the NER backend for NAME and ADDRESS: 'presidio', or "
                                                      "'presidio_engine' / 'spacy' / 'callable' for an object "
                                                      "passed as ner=")
    ner_language: str = Field(default="en", description="the language code given to a Presidio backend")

    @field_validator("kinds", mode="before")
    @classmethod
    def _kinds(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        kinds = [str(k).upper() for k in value]
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise InvalidArgumentError(f"unknown kinds {unknown}; known: {list(KINDS)}")
        if not kinds:
            raise InvalidArgumentError("at least one kind is needed")
        return tuple(k for k in KINDS if k in kinds)

    @field_validator("phone_regions", mode="before")
    @classmethod
    def _regions(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        try:
            return validate_regions(tuple(value))
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(str(exc)) from None


# ------------------------------------------------------------- resolution
def _resolve(candidates: list[Candidate]) -> list[Candidate]:
    """Keep the most specific, then longest, then earliest of overlapping spans (sorted, disjoint)."""
    if len(candidates) <= 1:
        return candidates
    accepted: list[Candidate] = []  # kept sorted by start; disjoint, so ends are sorted too
    starts: list[int] = []
    for cand in sorted(candidates, key=lambda c: (c[4], c[0] - c[1], c[0])):
        if not _overlaps(accepted, starts, cand[0], cand[1]):
            i = bisect.bisect_left(starts, cand[0])
            starts.insert(i, cand[0])
            accepted.insert(i, cand)
    return accepted


# ------------------------------------------------------------- redactor
class PIIRedactor(Redactor):
    """Masks e-mails, phones, cards, IBANs, IPs, secrets, national identifiers and dates of birth (names and
    addresses with ``ner=``) with stable placeholders (one session).

    ``ner``: the optional NER backend for NAME and ADDRESS: ``"presidio"`` (Presidio's ``AnalyzerEngine``,
    ``pip install 'contextkit[ner]'``), a spaCy pipeline (``spacy.load(...)``), a Presidio engine, or a
    callable ``text -> [(start, end, label)]``; see :mod:`._pii_ner`. Without it names and addresses
    are not masked."""

    name = "pii_redactor"

    def __init__(self, kinds: Iterable[str] = KINDS, entropy_threshold: float = 3.3,
                 keep_mapping: bool = False, phone_regions: Iterable[str] = DEFAULT_PHONE_REGIONS,
                 ner: Any = None, ner_language: str = "en") -> None:
        backend = ner_backend(ner, ner_language) if ner is not None else None
        self.config = RedactorConfig(kinds=(kinds,) if isinstance(kinds, str) else tuple(kinds),
                                     entropy_threshold=entropy_threshold, keep_mapping=keep_mapping,
                                     phone_regions=(phone_regions,) if isinstance(phone_regions, str)
                                     else tuple(phone_regions), ner=backend[0] if backend else None,
                                     ner_language=ner_language)
        kinds_set = set(self.config.kinds)
        finders: list[Callable[[_Scan], list[Candidate]]] = []
        if "EMAIL" in kinds_set:
            finders.append(_find_email)
        if "CARD" in kinds_set:
            finders.append(_find_card)
        if "IBAN" in kinds_set:
            finders.append(_find_iban)
        if "IP" in kinds_set:
            finders.append(_find_ip)
        if "SECRET" in kinds_set:
            finders += [_find_keys, _find_assignments, _find_credentials]
        if "ID" in kinds_set:
            finders.append(find_ids)
        if "DOB" in kinds_set:
            finders.append(find_dob)
        if backend is not None and kinds_set & NER_ONLY:
            finders.append(ner_finder(backend[1], frozenset(kinds_set & NER_ONLY)))
        self._finders = finders
        self._phone = phone_finder(self.config.phone_regions) if "PHONE" in kinds_set else None
        self._generic = _generic_finder(self.config.entropy_threshold) if "SECRET" in kinds_set else None
        self.reset()

    # ---------------------------------------------------------- config
    @property
    def kinds(self) -> tuple[str, ...]:
        return self.config.kinds

    @property
    def keep_mapping(self) -> bool:
        return self.config.keep_mapping

    @property
    def entropy_threshold(self) -> float:
        return self.config.entropy_threshold

    def _settings(self) -> dict[str, Any]:
        """The configuration (never the session's placeholders or originals); the NER keys only with a backend,
        so settings stored before it existed compare equal."""
        data = self.config.model_dump(mode="json")
        if data["ner"] is None:
            del data["ner"], data["ner_language"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **objects: Any) -> Self:
        """A redactor with ``data``'s configuration; a spaCy or callable NER backend is an object, so it
        must be passed again (``from_dict(data, ner=nlp)``): never silently dropped."""
        settings = RedactorConfig(**cls._settings_of(data)).model_dump()
        if "ner" in objects:
            settings["ner"] = objects.pop("ner")
        elif settings["ner"] not in (None, "presidio"):
            raise InvalidArgumentError(f"these settings used a {settings['ner']} NER backend for names and "
                                       "addresses: pass it again, from_dict(data, ner=...)")
        return cls(**settings, **objects)

    def __repr__(self) -> str:
        return (f"PIIRedactor(kinds={list(self.kinds)}, entropy_threshold={self.entropy_threshold}, "
                f"keep_mapping={self.keep_mapping}, phone_regions={list(self.config.phone_regions)}, "
                f"ner={self.config.ner!r})")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a PIIRedactor holds a session's secrets in memory and is not pickled; "
                        "send its to_dict() and build a new one")

    # ---------------------------------------------------------- session
    def reset(self) -> None:
        """Start a new session: forget every placeholder, original and statistic."""
        self._salt = os.urandom(16)
        self._numbers: dict[bytes, str] = {}
        self._issued: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._reserved: dict[str, set[int]] = {k: set() for k in KINDS}
        self._originals: dict[str, str] = {}
        self._stats: _Stats = {"texts": 0, "chars_in": 0, "chars_out": 0, "seconds": 0.0}
        self._removed: Counter[str] = Counter()

    def _digest(self, kind: str, value: str) -> bytes:
        return hashlib.blake2b(f"{kind}\x00{value}".encode("utf-8", "surrogatepass"),
                               key=self._salt, digest_size=16).digest()

    def _is_ours(self, kind: str, number: int) -> bool:
        return number <= self._issued[kind] and number not in self._reserved[kind]

    def _reserve_lookalikes(self, text: str) -> None:
        if "<" not in text:
            return
        for m in _PLACEHOLDER.finditer(text):
            kind, number = m.group(1), int(m.group(2))
            if not self._is_ours(kind, number):
                self._reserved[kind].add(number)

    def _placeholder(self, kind: str, value: str) -> str:
        key = self._digest(kind, value)
        ph = self._numbers.get(key)
        if ph is None:
            n = self._issued[kind] + 1
            while n in self._reserved[kind]:
                n += 1
            self._issued[kind] = n
            ph = self._numbers[key] = f"<{kind}_{n}>"
            if self.config.keep_mapping:
                self._originals[ph] = value
        return ph

    # ---------------------------------------------------------- redaction
    def detect(self, text: str) -> list[tuple[int, int, str, str]]:
        """The spans ``redact`` would mask, as (start, end, kind, detector); no placeholders issued."""
        return [c[:4] for c in self._spans(text)]

    def _spans(self, text: str) -> list[Candidate]:
        scan = _Scan(text)
        candidates: list[Candidate] = []
        for find in self._finders:
            candidates += find(scan)
        if self._phone is not None:  # after the others: runs inside a card or an IBAN are not matched again
            candidates += self._phone(scan, candidates)
        if self._generic is not None:
            candidates += self._generic(scan, candidates)
        accepted = _resolve(candidates)
        return self._propagate(text, accepted) if accepted else accepted

    @staticmethod
    def _propagate(text: str, accepted: list[Candidate]) -> list[Candidate]:
        """Mask every other occurrence of a found value in the same text (see the module docstring)."""
        found: Counter[str] = Counter(text[c[0]:c[1]] for c in accepted)
        first = {text[c[0]:c[1]]: c for c in reversed(accepted)}
        extra: list[Candidate] = []
        starts = [c[0] for c in accepted]
        for value, n in found.items():
            if text.count(value) <= n:  # no occurrence the detectors missed (count() never overlaps)
                continue
            kind, rank = first[value][2], first[value][4]
            pos = text.find(value)
            while pos >= 0:
                end = pos + len(value)
                if _overlaps(accepted, starts, pos, end) or any(pos < x[1] and end > x[0] for x in extra):
                    pos = text.find(value, pos + 1)
                else:
                    extra.append((pos, end, kind, "repeat", rank))
                    pos = text.find(value, end)
        return sorted(accepted + extra) if extra else accepted

    def redact(self, text: str) -> RedactionResult:
        """Mask every value found in ``text``; placeholders are shared with earlier calls."""
        if not isinstance(text, str):
            raise TypeError(f"redact() takes text, not {type(text).__name__}")
        t0 = time.perf_counter()
        self._reserve_lookalikes(text)
        accepted = self._spans(text)
        pieces: list[str] = []
        spans: list[RedactedSpan] = []
        counts: Counter[str] = Counter()
        last = 0
        for s, e, kind, detector, _ in accepted:
            ph = self._placeholder(kind, text[s:e])
            pieces.append(text[last:s])
            pieces.append(ph)
            spans.append(RedactedSpan(s, e, kind, ph, detector))
            counts[kind] += 1
            last = e
        pieces.append(text[last:])
        out = "".join(pieces) if spans else text
        self._removed.update(counts)
        st = self._stats
        st["texts"] += 1
        st["chars_in"] += len(text)
        st["chars_out"] += len(out)
        seconds = time.perf_counter() - t0
        st["seconds"] += seconds
        return RedactionResult(out, dict(counts), tuple(spans), len(text), seconds)

    def redact_many(self, texts: Iterable[str]) -> list[RedactionResult]:
        """``redact`` each text in order, in this session (placeholders shared across texts)."""
        return [self.redact(t) for t in texts]

    def restore(self, text: str) -> str:
        """Put the originals back in place of this session's placeholders (needs ``keep_mapping=True``)."""
        if not self.config.keep_mapping:
            raise RestoreUnavailableError(
                "restore() needs PIIRedactor(keep_mapping=True); this redactor kept no originals")
        if "<" not in text:
            return text
        originals = self._originals
        return _PLACEHOLDER.sub(lambda m: originals.get(m.group(), m.group()), text)

    # ---------------------------------------------------------- report
    def report(self) -> CompressionReport:
        """What this session removed so far, by kind (counts only: no values, no placeholders)."""
        st = self._stats
        distinct = Counter(ph[1:].rsplit("_", 1)[0] for ph in self._numbers.values())
        return CompressionReport(
            compressor=self.name, items_in=st["texts"], items_out=st["texts"],
            removed={k: self._removed[k] for k in self.kinds if self._removed[k]},
            seconds=st["seconds"],
            details={"chars_in": st["chars_in"], "chars_out": st["chars_out"],
                     "distinct_values": {k: distinct[k] for k in self.kinds if distinct[k]},
                     "kinds": list(self.kinds), "tokens_counted": False},
        )


def _overlaps(accepted: list[Candidate], starts: list[int], s: int, e: int) -> bool:
    """Whether [s, e) overlaps one of ``accepted`` (sorted, disjoint; ``starts`` their starts)."""
    i = bisect.bisect_left(starts, e)
    return i > 0 and accepted[i - 1][1] > s
