"""Masking personal data and secrets before text enters a prompt or an index.

``PIIRedactor`` finds six kinds of values and replaces each with a placeholder
``<KIND_N>``:

======  ================================================================
kind    what
======  ================================================================
EMAIL   e-mail addresses (``local@domain.tld``, Unicode letters allowed)
PHONE   ``+CC`` international numbers; NANP ``(555) 123-4567``,
        ``555-123-4567``, ``1-800-555-0199``; trunk-prefixed national
        numbers (UK ``020 7946 0958``, FR ``06 12 34 56 78``, DE
        ``030 12345678``, NL ``020-1234567``, ...)
CARD    payment card numbers: 13-19 digits, spaces or dashes, a known IIN
        prefix and length (Visa, Mastercard, Amex, Discover, Diners, JCB,
        UnionPay, Maestro, Mir) and a valid Luhn check digit
IBAN    country code, check digits and BBAN, the country's length, and
        the ISO 7064 mod-97 check; compact or in groups of four
IP      IPv4 (octets 0-255, no leading zeros) and IPv6 (checked by
        :mod:`ipaddress`)
SECRET  private-key PEM blocks; AWS access key ids, GitHub, GitLab, Slack,
        Stripe, OpenAI-style ``sk-``, Google ``AIza``, Hugging Face, npm and
        SendGrid tokens, JWTs, ``Bearer`` tokens; the value of
        ``password=`` / ``secret: `` / ``api_key=`` style assignments; and
        generic random-looking tokens (below)
======  ================================================================

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
named key formats > EMAIL > IBAN > CARD > IP > PHONE > secret assignment >
generic token), then the longer, then the earlier; losers are dropped whole,
so placeholders never nest or cut each other. Once a value is found, every
other occurrence of it in the same text is masked too, even where its
context alone would not have triggered a detector (inside a longer number,
say), and no detected value contains ``<`` or ``>``, so a placeholder cannot
combine with its neighbours into one: a reported value never survives in the
output.

What is deliberately *not* redacted: plain years, dates, times, version
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
can pass the generic detector; a phone number written as bare digits
(``5551234567``) is not found.

The generic detector. Hex digests (git SHAs, checksums) and UUIDs are
identifiers that technical prose is full of, so tokens made only of hex
digits and dashes are skipped, as are labelled digests (``sha256=...``) and
URL paths (a token after ``://`` or ``www.`` in the same word, or after a
host's dot): a hex or URL secret is caught when it is labelled
(``api_key=3f9a...``, ``?token=...``). Otherwise a token of at least 20
characters of ``[A-Za-z0-9+/_=-]`` is a secret when it has at least two of
lower case, upper case and digits; a Shannon entropy of at least
``entropy_threshold`` bits per character (default 3.3; random tokens of 20
characters have about 4); class switches at 10% or more of its characters,
camelCase word starts not counted (identifiers such as
``PyObject_ClearWeakRefs`` and 3-hydroxy-3-methylglutaryl have none); not
four or more short separated parts (``cp33-abi3-linux_x86_64``), an IBAN with
a typo (``IE80XDYW87791631807628``) or capitalised words and numbers
(``Gln356Pro871Glu1038``); a span no other detector claimed (a key, a PEM
line, an e-mail's local part); and letter pairs that do not
read as English (each pair scored by how common it is in English words: an
identifier averages well above 0.3 a pair, random letters about -1; a
single English-looking piece of 7+ letters also clears the token). About 98%
of random base62 tokens of 20 characters pass, 99.6% of 32, and 96-98% of
base64 / base36 ones of 20.

Speed: every pattern is compiled once at import and nothing scans the whole
text with a character class (see the detectors section); costlier checks
(Luhn, mod-97, entropy, :mod:`ipaddress`) run only on candidates. About
0.05-0.1 s per MB of English prose on a busy 2-core machine. A redactor is
not thread-safe: use one per session.
"""

from __future__ import annotations

import bisect
import hashlib
import ipaddress
import math
import os
import re
import string
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contextkit.compressors.base import CompressionReport

__all__ = [
    "KINDS",
    "PIIRedactor",
    "RedactedSpan",
    "RedactionResult",
    "RedactorConfig",
    "RestoreUnavailableError",
]

KINDS: tuple[str, ...] = ("EMAIL", "PHONE", "CARD", "IBAN", "IP", "SECRET")

# Ranks for overlap resolution: lower wins.
_R_PEM, _R_KEY, _R_EMAIL, _R_IBAN, _R_CARD, _R_IP, _R_PHONE, _R_ASSIGN, _R_GENERIC = range(9)

Candidate = tuple[int, int, str, str, int]  # start, end, kind, detector, rank

_PLACEHOLDER = re.compile(r"<(EMAIL|PHONE|CARD|IBAN|IP|SECRET)_([1-9]\d*)>")


class RestoreUnavailableError(RuntimeError):
    """``restore()`` on a redactor built without ``keep_mapping=True``."""


# ------------------------------------------------------------------ records
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

    @property
    def changed(self) -> bool:
        return bool(self.spans)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "counts": dict(self.counts), "spans": [s.to_dict() for s in self.spans]}


class RedactorConfig(BaseModel):
    """What ``to_dict()`` / ``from_dict()`` carry: configuration only, never session state."""

    model_config = ConfigDict(extra="forbid")

    kinds: tuple[str, ...] = Field(default=KINDS, description="which kinds to redact")
    entropy_threshold: float = Field(default=3.3, ge=0.0, le=8.0,
                                     description="bits per character a generic secret token needs")
    keep_mapping: bool = Field(default=False, description="keep placeholder -> original in memory for restore()")

    @field_validator("kinds", mode="before")
    @classmethod
    def _kinds(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        kinds = [str(k).upper() for k in value]
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown kinds {unknown}; known: {list(KINDS)}")
        if not kinds:
            raise ValueError("at least one kind is needed")
        return tuple(k for k in KINDS if k in kinds)


# ------------------------------------------------------------- helpers
def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card_brand(d: str) -> str | None:
    """The card network of a digit string by its IIN prefix and length, or None."""
    n = len(d)
    p2, p3, p4, p6 = int(d[:2]), int(d[:3]), int(d[:4]), int(d[:6])
    if d[0] == "4":
        return "visa" if n in (13, 16, 19) else None
    if 51 <= p2 <= 55 or 2221 <= p4 <= 2720:
        return "mastercard" if n == 16 else None
    if p2 in (34, 37):
        return "amex" if n == 15 else None
    if 2200 <= p4 <= 2204:
        return "mir" if 16 <= n <= 19 else None
    if p4 == 6011 or 644 <= p3 <= 649 or p2 == 65 or 622126 <= p6 <= 622925:
        return "discover" if 16 <= n <= 19 else None
    if 3528 <= p4 <= 3589:
        return "jcb" if 16 <= n <= 19 else None
    if 300 <= p3 <= 305 or p4 == 3095 or p2 in (36, 38, 39):
        return "diners" if 14 <= n <= 19 else None
    if p2 == 62:
        return "unionpay" if 16 <= n <= 19 else None
    if p4 in (5018, 5020, 5038, 5893, 6304, 6759, 6761, 6762, 6763) or p2 in (50, 56, 57, 58):
        return "maestro" if 13 <= n <= 19 else None
    return None


# IBAN length by country (ISO 13616 registry).
_IBAN_LENGTH = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27,
    "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25,
    "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18,
    "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33,
    "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}


def _iban_ok(compact: str) -> bool:
    if _IBAN_LENGTH.get(compact[:2]) != len(compact) or not compact[2:4].isdigit():
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def _entropy(s: str) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


_CLASS_OF = str.maketrans({**dict.fromkeys(string.ascii_lowercase, "l"), **dict.fromkeys(string.ascii_uppercase, "u"),
                           **dict.fromkeys(string.digits, "d"), **dict.fromkeys("+/_=-", "s")})
_CAMEL_HUMP = re.compile(r"(?=lul)")


def _char_class(ch: str) -> int:
    if "a" <= ch <= "z":
        return 1
    if "A" <= ch <= "Z":
        return 2
    if "0" <= ch <= "9":
        return 3
    return 0


_CAMEL_PIECE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
# English letter pairs by frequency, counted on Topical-Chat conversations: the 50 most frequent
# pairs make 56% of all pairs there, the next 100 33%, the next 100 9%; the other 426 of the 676
# possible pairs make 2%. A pair scores 2, 1, 0 or -2 by its band: English words average about
# +1.4 a pair, uniformly random letters about -1.
_PAIR_SCORE: dict[str, int] = {pair: score for score, pairs in (
    (2, "al am an ar as at ay be ch ea ed en er es fo ha he hi ho in is it la le li ll me nd ne ng no nt of "
        "on oo or ot ou ow re se st te th ti to ve wa ye yo"),
    (1, "ab ac ad ag ah ai ak av ba bi bl bo bu ca ce ck co ct de di do ec ee el em et ev ey fa fe fl ga ge gh "
        "gi go gr ic id ie if ig ik il im io ir ke ki kn ld lo ly ma mi mo nf ni nk ns od ol om op os pa pe pl "
        "po pr ra rd ri ro rs rt ru ry sh si so sp ss su ta tb tr ts tt uc ue ul un ur us ut we wh wi wo"),
    (0, "af ap au aw az br by cc ci cl cr cu da dn dr ds du dy ef eg ei eo ep ew ex ff fi fr ft fu gs gu ht hu "
        "hy ia ib ip iv jo ju ks ls lt lu mb mm mp ms mu my na nc nj nl nn nu ny oa ob oc oe og oh oi ok ov ph "
        "pi pp ps pu qu rb rg rk rl rm rn rr sa sc sn tc tl tu tw ty ua ug ui um up vi vo wl wn yb yi ys"),
) for pair in pairs.split()}
_PAIRS_MIN, _PAIRS_MEAN = 6, 0.3  # this many letter pairs, scoring at least this on average: identifiers
_WORD_MEAN = 0.5  # a piece of 7+ letters scoring at least this on average: an English word
_SWITCH_SHARE = 0.1  # class switches per character below this: an identifier, not a random token
_HEXISH = re.compile(r"[0-9A-Fa-f\-]+")
_DIGEST_LABEL = re.compile(r"(?i)(?:md5|sha\d*|sha3-\d+|blake2[bs]?|crc32|xxh\d*)[=\-]")
_SEPARATORS = re.compile(r"[+/_=\-]+")


def _looks_random(token: str, threshold: float) -> bool:
    """Whether a token of ``[A-Za-z0-9+/_=-]`` reads as a random secret rather than a word or identifier."""
    if _HEXISH.fullmatch(token):  # git SHAs, digests, UUIDs: identifiers (see the module docstring)
        return False
    if _DIGEST_LABEL.match(token):  # sha256=..., md5=...: a labelled digest, not a secret
        return False
    classes = token.translate(_CLASS_OF)  # "l", "u", "d" per character, "s" for a separator
    alnum = len(classes) - classes.count("s")
    if alnum < 16 or len(set(classes) - {"s"}) < 2:
        return False
    if _entropy(token) < threshold:
        return False
    # class changes inside each separated part, not counting those of camelCase (Upper->lower and
    # lower->Upper->lower): 3-hydroxy-3-methylglutaryl and PyObject_GetAttr have none. No two-letter
    # pattern here can overlap itself, so str.count is exact; "lul" can ("lulul"), hence the lookahead.
    switches = sum(classes.count(pair) for pair in ("ld", "dl", "ud", "du", "lu")) - len(_CAMEL_HUMP.findall(classes))
    segments = [x for x in _SEPARATORS.split(token) if x]
    if switches / (alnum - len(segments)) < _SWITCH_SHARE:
        return False
    if len(segments) >= 4 and sum(map(len, segments)) <= 5 * len(segments):
        return False  # cp33-cp33m-linux_x86_64: short structured parts
    pieces = _CAMEL_PIECE.findall(token)
    words = [p for p in pieces if not p[0].isdigit()]
    if len(words) >= 3 and all(len(p) >= 3 and p[0].isupper() and p[1:].islower() for p in words):
        return False  # Gln356Pro871Glu1038, Model3Build12Patch7: capitalised words and numbers
    pairs = score = 0  # letter pairs inside camelCase pieces, and how English they read
    for piece in pieces:
        if piece[0].isdigit():
            continue
        piece = piece.lower()
        piece_score = sum(_PAIR_SCORE.get(piece[i:i + 2], -2) for i in range(len(piece) - 1))
        if len(piece) >= 7 and piece_score >= _WORD_MEAN * (len(piece) - 1):
            return False  # holds a long English-looking word: CD14++CD16+monocytes
        pairs += len(piece) - 1
        score += piece_score
    return not (pairs >= _PAIRS_MIN and score >= _PAIRS_MEAN * pairs)  # words and identifiers read as English


def _pair_mean(token: str) -> float:
    """Average English score of the letter pairs inside the camelCase pieces of ``token``."""
    scores = [_PAIR_SCORE.get(p[i:i + 2], -2) for p in (x.lower() for x in _CAMEL_PIECE.findall(token))
              for i in range(len(p) - 1) if not p[0].isdigit()]
    return sum(scores) / len(scores) if scores else 0.0


def _values_random(value: str) -> bool:
    """A key body that mixes at least two of lower case, upper case and digits."""
    return len({_char_class(ch) for ch in value} - {0}) >= 2


# ------------------------------------------------------------- detectors
# A detector takes a ``_Scan`` of the text and returns candidates (start, end, kind,
# detector, rank). Python's regex engine skips ahead quickly only to a literal, not to a
# character class (a bare r"\d" costs ~40 ms per MB here), so nothing scans the whole
# text that does not start with a literal: runs are found on a UTF-8 copy with
# character classes folded to one byte each (bytes.translate is a C loop; str.translate
# is not, for non-ASCII text), where digits are all "0" and a numeric run starts with
# the literal "0". Every structural character is ASCII, so no run starts or ends inside
# a multi-byte character; offsets are mapped back to the text for candidates only.
# Digit-based kinds then look only inside numeric runs, e-mails only around "@", key
# formats where their literal prefix occurs, assignments around their key words.
# Boundaries are checked in Python on the few candidates.

_FOLD = bytes.maketrans(b"0123456789" + bytes(range(65, 91)) + bytes(range(97, 123)),
                        b"0" * 10 + b"A" * 26 + b"a" * 26)
_FOLD_TOKEN = bytes.maketrans(b"0123456789+/_=-" + bytes(range(65, 91)) + bytes(range(97, 123)), b"T" * 67)
_NUMERIC = re.compile(rb"0[0 ().\-/+]{5,}")  # from a digit, a run that could hold a phone, card or IPv4
_IBAN_START = re.compile(rb"AA00")  # two capitals, two digits
_LONG_TOKEN = re.compile(rb"T" * 20 + rb"T*")  # 20+ characters of [A-Za-z0-9+/_=-]
_ASSIGN_STEMS = (b"pass", b"pwd", b"secret", b"token", b"credential", b"key")


class _Scan:
    """One text and what several detectors share: its UTF-8 and folded forms, numeric runs."""

    __slots__ = ("text", "raw", "ascii", "_folded", "_regions")

    def __init__(self, text: str) -> None:
        self.text = text
        self.raw = text.encode("utf-8", "surrogatepass")
        self.ascii = len(self.raw) == len(text)
        self._folded: bytes | None = None
        self._regions: list[tuple[int, int]] | None = None

    @property
    def folded(self) -> bytes:
        if self._folded is None:
            self._folded = self.raw.translate(_FOLD)
        return self._folded

    def spans(self, pattern: re.Pattern[bytes], data: bytes) -> list[tuple[int, int]]:
        """Spans, in characters of the text, of ``pattern`` in ``data`` (a byte form of the text)."""
        spans = [m.span() for m in pattern.finditer(data)]
        if not spans or self.ascii:
            return spans
        index = self.char_index(sorted({x for span in spans for x in span}))
        return [(index[a], index[b]) for a, b in spans]

    def char_index(self, offsets: list[int]) -> dict[int, int]:
        """Byte offset -> character offset, for sorted byte offsets at character boundaries."""
        index, b_prev, c_prev = {}, 0, 0
        for off in offsets:
            c_prev += len(self.raw[b_prev:off].decode("utf-8", "surrogatepass"))
            b_prev = off
            index[off] = c_prev
        return index

    @property
    def regions(self) -> list[tuple[int, int]]:
        """Runs of digits, spaces and ``().-/+`` from a digit (widened over a leading "(" or "+")."""
        if self._regions is None:
            text = self.text
            regions = []
            for lo, hi in self.spans(_NUMERIC, self.folded):
                while lo > 0 and text[lo - 1] in "(+" and lo > hi - 40:
                    lo -= 1
                regions.append((lo, hi))
            self._regions = regions
        return self._regions


_EMAIL = re.compile(
    r"[\w%+\-](?:[\w.%+\-]{0,62}[\w%+\-])?@"
    r"(?:[^\W_](?:[\w\-]{0,61}[^\W_])?\.)+[^\W\d_]{2,24}(?![\w\-]|\.[^\W_])"
)


def _find_email(scan: _Scan) -> list[Candidate]:
    text = scan.text
    out: list[Candidate] = []
    at = text.find("@")
    last_end = 0
    while at >= 0:
        for m in _EMAIL.finditer(text, max(last_end, at - 64), min(len(text), at + 256)):
            s, e = m.span()
            if s > at:
                break
            if e <= at or (s > 0 and (_is_word(text[s - 1]) or text[s - 1] in ".%+-")):
                continue
            local = m.group().split("@", 1)[0]
            if ".." not in local and not local.startswith("."):
                out.append((s, e, "EMAIL", "email", _R_EMAIL))
                last_end = e
            break
        at = text.find("@", max(at + 1, last_end))
    return out


def _digit_boundary_ok(text: str, start: int, end: int) -> bool:
    """Not part of a longer number, word, decimal or dotted/dashed chain."""
    if start > 0:
        p = text[start - 1]
        if _is_word(p) or p == "+" or (p in ".,-/" and start > 1 and text[start - 2].isdigit()):
            return False
    if end < len(text):
        n = text[end]
        if _is_word(n) or (n in ".,-/" and end + 1 < len(text) and text[end + 1].isdigit()):
            return False
    return True


def _joined(text: str, end: int) -> bool:
    """Whether a digit group ending at ``end`` goes on as a word, date or decimal ("3D", "12/25", "3.5")."""
    if end < len(text) and text[end].isalpha():
        return True
    return end + 1 < len(text) and text[end] in "/.:,-" and text[end + 1].isdigit()


_CARD = re.compile(r"\d\d{1,5}(?:[ \-]\d{1,6}){1,5}|\d{13,19}")
_DIGIT_RUN = re.compile(r"\d+")


def _find_card(scan: _Scan) -> list[Candidate]:
    text = scan.text
    out: list[Candidate] = []
    for lo, hi in scan.regions:
        if hi - lo < 13:
            continue
        pos = lo
        while True:
            m = _CARD.search(text, pos, hi)
            if m is None:
                break
            hit = _card_in(text, m)
            if hit:
                out.append(hit)
                pos = hit[1]
            else:  # retry after the first digit run: a card starts a run, never inside one
                pos = m.start() + len(_DIGIT_RUN.match(m.group()).group())
    return out


def _card_in(text: str, m: re.Match[str]) -> Candidate | None:
    base = m.start()
    groups = [(g.start() + base, g.end() + base) for g in _DIGIT_RUN.finditer(m.group())]
    if len(groups) == 1:
        s, e = groups[0]
        d = text[s:e]
        if 13 <= len(d) <= 19 and _digit_boundary_ok(text, s, e) and _card_brand(d) and _luhn_ok(d):
            return (s, e, "CARD", "card", _R_CARD)
        return None
    for i in range(len(groups)):
        if groups[i][1] - groups[i][0] != 4:  # printed card numbers start with a group of four
            continue
        for j in range(len(groups) - 1, i, -1):
            s, e = groups[i][0], groups[j][1]
            if len({text[groups[k][1]] for k in range(i, j)}) != 1:
                continue  # one kind of separator throughout
            if any(not 3 <= b - a <= 6 for a, b in groups[i + 1 : j]) or not 1 <= e - groups[j][0] <= 6:
                continue  # groups of three to six digits after the first; the last may be shorter
            if text[s - 1:s] == text[groups[i][1]] and _after_group(text, s - 1):
                continue  # a printed card number starts its run of groups: "DE59 2344 8783 ..." is not one
            if j + 1 < len(groups) and text[e] == text[groups[i][1]] and not _joined(text, groups[j + 1][1]):
                continue  # and ends it: "4121 1488 0508 6371 414" is a 19-digit number, not a card + 414
            digits = "".join(text[a:b] for a, b in groups[i : j + 1])
            if (13 <= len(digits) <= 19 and _digit_boundary_ok(text, s, e) and _card_brand(digits)
                    and _luhn_ok(digits)):
                return (s, e, "CARD", "card", _R_CARD)
    return None


_IBAN = re.compile(r"[A-Z][A-Z]\d\d(?: ?[A-Z0-9]{1,4}){2,8}")


def _find_iban(scan: _Scan) -> list[Candidate]:
    text = scan.text
    out: list[Candidate] = []
    end_prev = 0
    for s, _ in scan.spans(_IBAN_START, scan.folded):
        if s < end_prev or (s > 0 and _is_word(text[s - 1])):
            continue
        m = _IBAN.match(text, s)
        if m is None:
            continue
        raw = m.group()
        want = _IBAN_LENGTH.get(raw[:2])
        if want is None:
            continue
        taken, end = 0, s  # walk the raw text until `want` non-space characters are taken
        for k, ch in enumerate(raw):
            if ch != " ":
                taken += 1
                if taken == want:
                    end = s + k + 1
                    break
        if taken < want or (end < len(text) and _is_word(text[end])):
            continue
        body = text[s:end]
        if " " in body and any(len(g) != 4 for g in body.split(" ")[:-1]):
            continue  # printed IBANs come in groups of four
        if _iban_ok(body.replace(" ", "")):
            out.append((s, end, "IBAN", "iban", _R_IBAN))
            end_prev = end
    return out


_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(r"\d\d{0,2}\.\d{1,3}\.\d{1,3}\.\d{1,3}")
_IPV4_STRICT = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
_IPV6_HINT = re.compile(r":[0-9A-Fa-f:]")
_IPV6 = re.compile(
    r"[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.\d{1,3}\.\d{1,3}\.\d{1,3})?(?:%[\w.]+)?"
)
_HEX = frozenset("0123456789abcdefABCDEF")
_VERSION_CONTEXT = re.compile(r"(?:[=<>~!]=|[<>][ \t]|\bEC|(?i:\b(?:versions?|ver|v|release|rev|revision|kernel|"
                              r"section|chapter|build|patch|python)\b[:.]?))[ \t]*\Z")  # EC: enzyme numbers


def _find_ip(scan: _Scan) -> list[Candidate]:
    text = scan.text
    out: list[Candidate] = []
    for lo, hi in scan.regions:
        for m in _IPV4.finditer(text, lo, hi):
            s, e = m.span()
            if not _IPV4_STRICT.fullmatch(m.group()):
                continue
            if s > 0 and (_is_word(text[s - 1]) or text[s - 1] in ".-"):
                continue
            if e < len(text) and (_is_word(text[e]) or (text[e] == "." and e + 1 < len(text)
                                                        and text[e + 1].isalnum())):
                continue
            if _VERSION_CONTEXT.search(text, max(0, s - 12), s):
                continue  # "version 1.2.3.4", ">= 1.4.5.0", "Section 6.3.2.3"
            out.append((s, e, "IP", "ipv4", _R_IP))
    if "::" not in text and text.count(":") < 7:
        return out
    last_end = 0
    for h in _IPV6_HINT.finditer(text):
        start = h.start()
        if start < last_end:
            continue
        while start > 0 and start > h.start() - 4 and text[start - 1] in _HEX:
            start -= 1
        m = _IPV6.match(text, start)
        if m is None:
            continue
        s, e = m.span()
        cand = m.group()
        if cand.endswith(":") and not cand.endswith("::"):
            cand, e = cand[:-1], e - 1
        last_end = max(last_end, e)
        if cand.count(":") < 2 or (s > 0 and (_is_word(text[s - 1]) or text[s - 1] in ":.")):
            continue
        if e < len(text) and (_is_word(text[e]) or text[e] == ":"):
            continue
        addr = cand.split("%", 1)[0]
        groups = [g for g in re.split(r"[:.]", addr) if g]
        if len(groups) < 2 or max(map(len, groups)) < 3 or not any(ch.isdigit() for ch in addr):
            continue  # "ham[1::3]" is a slice; an address has a group of three hex digits or more
        try:
            ipaddress.IPv6Address(addr)
        except ValueError:
            continue
        out.append((s, e, "IP", "ipv6", _R_IP))
    return out


_PHONE_INTL = re.compile(r"\+[1-9]\d{0,2}(?:[ .\-]?\(0\))?(?:[ .\-]?(?:\(\d{1,5}\)|\d{1,6})){1,7}")
_PHONE_NANP = re.compile(
    r"(?:1[ .\-]?)?(?:\(\d{3}\)[ .\-]?|\d{3}(?P<s>[ .\-]))\d{3}(?(s)(?P=s)|[ .\-])\d{4}"
)
_PHONE_TRUNK = re.compile(
    r"(?:\(0\d{1,4}\)[ ]?|0\d{1,4}[ .\-/])\d{2,8}(?:(?P<t>[ .\-])\d{2,4}(?:(?P=t)\d{2,4}){0,3})?"
)
_PHONE_SEPS = re.compile(r"\d([ .\-]+)(?=[\d(])")


_NUMBER_GROUP = re.compile(r"[A-Z]{1,2}\d{2,8}|\d{3,8}")
_CODE_GROUP = re.compile(r"[A-Z0-9]{4}")


def _after_group(text: str, sep: int, depth: int = 0) -> bool:
    """Whether the separator at ``sep`` follows a group of an account-like run: three or more digits,
    or two or more after one or two capitals ("4669", "DE59"), or four capitals and digits after such
    a group ("GB66 OYPR").
    A card or phone number starts such a run; "Wnt7a 3528 ..." or "IGF2 2500 ..." are not runs."""
    k = sep
    while k > 0 and text[k - 1].isalnum() and sep - k < 9:
        k -= 1
    if k > 0 and text[k - 1].isalnum():
        return False
    if _NUMBER_GROUP.fullmatch(text, k, sep):
        return True
    return (depth < 6 and bool(_CODE_GROUP.fullmatch(text, k, sep)) and k > 1 and text[k - 1] == text[sep]
            and _after_group(text, k - 1, depth + 1))


def _phone_start_ok(text: str, s: int) -> bool:
    """Not glued to a word, not inside a dotted or dashed chain of numbers, not the tail of a longer
    run of digit groups ("4669 0923 4139 8847")."""
    if s == 0:
        return True
    p = text[s - 1]
    if _is_word(p) or p == "+":
        return False
    if p in ".-/,)" and s > 1 and text[s - 2].isdigit():
        return False
    return not (p == " " and _after_group(text, s - 1))


def _phone_end_ok(text: str, e: int) -> bool:
    if e >= len(text):
        return True
    n = text[e]
    if _is_word(n) or n == "(":
        return False
    return not (n in ".-/" and e + 1 < len(text) and text[e + 1].isdigit())


def _find_phone(scan: _Scan) -> list[Candidate]:
    text = scan.text
    out: list[Candidate] = []
    for lo, hi in scan.regions:
        if hi - lo < 8:
            continue
        if "+" in text[lo:hi]:
            for m in _PHONE_INTL.finditer(text, lo, hi):
                hit = _intl_phone(text, m)
                if hit:
                    out.append(hit)
        for m in _PHONE_NANP.finditer(text, lo, hi):
            s, e = m.span()
            if _phone_start_ok(text, s) and _phone_end_ok(text, e):
                out.append((s, e, "PHONE", "phone_nanp", _R_PHONE))
        for m in _PHONE_TRUNK.finditer(text, lo, hi):
            s = m.start()
            if m.group().startswith("00") or not _phone_start_ok(text, s):
                continue
            runs = list(_DIGIT_RUN.finditer(m.group()))
            for k in range(len(runs), 1, -1):  # the longest run of groups that makes a number
                lengths = [len(r.group()) for r in runs[:k]]
                e = s + runs[k - 1].end()
                if 9 <= sum(lengths) <= 12 and min(lengths) >= 2 and _phone_end_ok(text, e):
                    out.append((s, e, "PHONE", "phone_national", _R_PHONE))
                    break
    return out


def _intl_phone(text: str, m: re.Match[str]) -> Candidate | None:
    s = m.start()
    if s > 0 and (_is_word(text[s - 1]) or text[s - 1] in "+.)"):
        return None
    body = m.group()
    for cut in reversed([g.end() for g in _DIGIT_RUN.finditer(body)]):  # the longest valid prefix
        part = body[:cut]
        if part.endswith("(0") or part.count("(") != part.count(")"):
            continue
        inner = part.replace("(0)", "")
        runs = _DIGIT_RUN.findall(inner)
        if not 8 <= sum(map(len, runs)) <= 15:
            continue
        if len(runs) > 2 and min(map(len, runs[2:])) < 2:
            continue  # after the country and area codes, groups have two digits or more
        later = set(_PHONE_SEPS.findall(inner)[1:])
        if len(later) > 1 and not later <= {" ", "-"}:
            continue  # "+1.23 4.56 7.89": a list of numbers, not a phone
        if _phone_end_ok(text, s + cut):
            return (s, s + cut, "PHONE", "phone_intl", _R_PHONE)
    return None


def _boundary_secret(text: str, s: int, e: int) -> bool:
    """A key token must not be glued to letters or digits on either side."""
    if s > 0 and (text[s - 1].isalnum() or text[s - 1] == "_"):
        return False
    return not (e < len(text) and (text[e].isalnum() or text[e] == "_"))


# name, pattern (each starts with a literal), whether the token must mix character classes
_KEY_PATTERNS: list[tuple[str, re.Pattern[str], bool]] = [
    ("aws_access_key_id", re.compile(r"A(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|ROA|PKA|SCA)[A-Z0-9]{16}"), False),
    ("github_token", re.compile(r"gh[pousr]_[A-Za-z0-9]{36,255}"), True),
    ("github_pat", re.compile(r"github_pat_[A-Za-z0-9_]{22,255}"), True),
    ("gitlab_token", re.compile(r"gl(?:pat|dt|ptt|rt)-[A-Za-z0-9_\-]{20,64}"), True),
    ("slack_token", re.compile(r"xox[abprs]-[A-Za-z0-9\-]{10,250}"), True),
    ("stripe_key", re.compile(r"k_(?:live|test)_[A-Za-z0-9]{10,247}"), True),  # after s, p or r
    ("openai_key", re.compile(r"sk-(?:proj-|svcacct-|admin-|ant-(?:api\d\d-)?)?[A-Za-z0-9_\-]{20,200}"), True),
    ("google_api_key", re.compile(r"AIza[0-9A-Za-z_\-]{35}"), False),
    ("huggingface_token", re.compile(r"hf_[A-Za-z0-9]{30,40}"), True),
    ("npm_token", re.compile(r"npm_[A-Za-z0-9]{36}"), True),
    ("sendgrid_key", re.compile(r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{16,64}"), True),
    ("jwt", re.compile(r"eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"), False),
]
_BEARER = re.compile(r"earer[ \t]+([A-Za-z0-9\-._~+/]{20,}=*)")  # after B or b
_PEM = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----[^<>]*?(?:-----END \1-----|(?=\n[ \t]*\n|[<>])|\Z)"
)


def _find_keys(scan: _Scan) -> list[Candidate]:
    text = scan.text
    out: list[Candidate] = []
    if "-----BEGIN" in text:
        out += [(m.start(), m.end(), "SECRET", "private_key", _R_PEM) for m in _PEM.finditer(text)]
    for name, pattern, mixed in _KEY_PATTERNS:
        for m in pattern.finditer(text):
            s, e = m.span()
            if name == "stripe_key":
                if s == 0 or text[s - 1] not in "spr":
                    continue
                s -= 1
            if not _boundary_secret(text, s, e) or len(set(text[s:e])) < 8:
                continue  # glued to a word, or a stand-in such as AKIAXXXXXXXXXXXXXXXX
            if not mixed or _values_random(text[s:e]):
                out.append((s, e, "SECRET", name, _R_KEY))
    for m in _BEARER.finditer(text):
        s = m.start()
        if s > 0 and text[s - 1] in "Bb" and (s == 1 or not _is_word(text[s - 2])) and _values_random(m.group(1)):
            out.append((m.start(1), m.end(1), "SECRET", "bearer_token", _R_KEY))
    return out


# A key word, then an optional closing quote, a separator and the value (quoted or not).
_ASSIGN = re.compile(
    r"(?i:(?:(?:client|app|api|access|auth|refresh|session|secret|private|encryption|signing|db|admin|user|"
    r"master|aws|bearer|csrf|oauth|github|slack|stripe|openai)[_\-.]?)?"
    r"(?:pass(?:word|wd|phrase)?|pwd|secret|token|credentials?)"
    r"|(?:api|access|secret|private|encryption|signing|client|master|license|account)[_\-.]?key)"
    r"[\"']?[ \t]*(:=|=>|=|:)[ \t]*"
    r"(?:(\"|')([^\"'\n\r<>]{4,200})\2|([^\s\"'<>,;()\[\]{}`]{4,200}))"
)
_PLACEHOLDER_VALUE = re.compile(r"<[^<>]*>|\$\{[^}]*\}|\{\{.*\}\}|%(?:\(\w+\))?[sdr]|\.{3}|(?i:x{4,}|\*{3,}|none|null|"
                                r"true|false|changeme|your[_\- ].*|redacted|hidden)")
_NAMEISH = re.compile(r"[A-Za-z_]+(?:\.[A-Za-z_]+)*")
_TRAILING = ".,:;)]}"  # sentence punctuation after an unquoted value ("!" and "?" are kept: passwords use them)


def _find_assignments(scan: _Scan) -> list[Candidate]:
    text = scan.text
    if ":" not in text and "=" not in text:
        return []
    raw_lower = scan.raw.lower()  # ASCII-only lower-casing: byte offsets stay put
    stems = []
    for stem in _ASSIGN_STEMS:  # one literal search each: faster than an alternation
        i = raw_lower.find(stem)
        while i >= 0:
            after = raw_lower[i + len(stem):i + len(stem) + 16]
            if b":" in after or b"=" in after:
                stems.append((i, i + len(stem)))
            i = raw_lower.find(stem, i + 1)
    stems.sort()
    if not stems:
        return []
    if not scan.ascii:
        index = scan.char_index(sorted({x for sp in stems for x in sp}))
        stems = [(index[a], index[b]) for a, b in stems]
    out: set[Candidate] = set()
    for i, _ in stems:
        for j in range(max(0, i - 14), i + 1):  # the key word may start a few characters earlier
            m = _ASSIGN.match(text, j)
            if m is not None and m.start(1) > i:
                hit = _assignment(text, m)
                if hit:
                    out.add(hit)
                break
    return sorted(out)


def _assignment(text: str, m: re.Match[str]) -> Candidate | None:
    s = m.start()
    if s > 0:
        p = text[s - 1]
        # the key may end an identifier (DB_PASSWORD, dbPassword, x.secret) but not a word (bypass)
        if p.isalnum() and not (p.islower() and text[s].isupper()):
            return None
    sep = m.group(1)
    if m.group(3) is not None:
        value = m.group(3)
        if not value.strip() or len(set(value)) == 1 or _PLACEHOLDER_VALUE.fullmatch(value):
            return None  # "<token>", "${TOKEN}", "xxxx", "your-api-key": a stand-in, not a value
        return (m.start(3), m.end(3), "SECRET", "assignment", _R_ASSIGN)
    vs, ve = m.span(4)
    value = m.group(4)
    while value and value[-1] in _TRAILING:
        value, ve = value[:-1], ve - 1
    if len(value) < 6 or len(set(value)) == 1 or value[0] in "${" or _PLACEHOLDER_VALUE.fullmatch(value):
        return None
    has_digit = any(ch.isdigit() for ch in value)
    if sep == ":" and not has_digit:
        return None  # "Password: Click here", "secret:--nurse": prose
    if not has_digit and _NAMEISH.fullmatch(value):
        passphrase = value.isalpha() and value.islower() and len(value) >= 12
        random_letters = value.isalpha() and len(value) >= 8 and _pair_mean(value) < -0.5
        if not (passphrase or random_letters):
            return None  # password=user.password, token=getToken: code, not a value
    return (vs, ve, "SECRET", "assignment", _R_ASSIGN)


_WORD_BREAKS = " \t\n\r<>()[]\"'`"


def _in_url(text: str, s: int) -> bool:
    """Whether position ``s`` is inside a URL: after "://" or "www." in the same word, or after "host."."""
    lo = max(0, s - 4096)
    start = max(text.rfind(ch, lo, s) for ch in _WORD_BREAKS) + 1
    word = text[max(start, lo):s]
    if "://" in word or word.startswith("www."):
        return True
    return word.endswith(".") and "/" in text[s:s + 300].split(None, 1)[0]


def _iban_shaped(token: str) -> bool:
    """A known country code, two digits and that country's length: an IBAN with a typo, not a secret."""
    return (_IBAN_LENGTH.get(token[:2]) == len(token) and token[2:4].isdigit()
            and token.isalnum() and token.upper() == token)


def _generic_finder(threshold: float) -> Callable[[_Scan, list[Candidate]], list[Candidate]]:
    def find(scan: _Scan, found: list[Candidate]) -> list[Candidate]:
        text = scan.text
        out: list[Candidate] = []
        taken = _merge(found)  # spans other detectors proposed: a generic token there would lose anyway
        starts = [a for a, _ in taken]
        for s, e in scan.spans(_LONG_TOKEN, scan.raw.translate(_FOLD_TOKEN)):
            i = bisect.bisect_left(starts, e)
            if i and taken[i - 1][1] > s:
                continue
            core = text[s:e].strip("-/")  # judged without edge dashes and slashes, masked with them
            if len(core) >= 20 and not _in_url(text, s) and not _iban_shaped(core) and _looks_random(core, threshold):
                out.append((s, e, "SECRET", "high_entropy", _R_GENERIC))
        return out

    return find


def _merge(found: list[Candidate]) -> list[tuple[int, int]]:
    """The union of candidate spans, as sorted disjoint (start, end) intervals."""
    merged: list[tuple[int, int]] = []
    for s, e, *_ in sorted(found):
        if merged and s < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


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
class PIIRedactor:
    """Masks e-mails, phones, cards, IBANs, IPs and secrets with stable placeholders (one session)."""

    name = "pii_redactor"

    def __init__(self, kinds: Iterable[str] = KINDS, entropy_threshold: float = 3.3,
                 keep_mapping: bool = False) -> None:
        self.config = RedactorConfig(kinds=tuple(kinds) if not isinstance(kinds, str) else kinds,
                                     entropy_threshold=entropy_threshold, keep_mapping=keep_mapping)
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
        if "PHONE" in kinds_set:
            finders.append(_find_phone)
        if "SECRET" in kinds_set:
            finders += [_find_keys, _find_assignments]
        self._finders = finders
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

    def to_dict(self) -> dict[str, Any]:
        """The configuration (never the session's placeholders or originals)."""
        return self.config.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PIIRedactor:
        return cls(**RedactorConfig(**data).model_dump())

    def __repr__(self) -> str:
        return (f"PIIRedactor(kinds={list(self.kinds)}, entropy_threshold={self.entropy_threshold}, "
                f"keep_mapping={self.keep_mapping})")

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
        self._stats = {"texts": 0, "chars_in": 0, "chars_out": 0, "seconds": 0.0}
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
        st["seconds"] += time.perf_counter() - t0
        return RedactionResult(out, dict(counts), tuple(spans))

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
