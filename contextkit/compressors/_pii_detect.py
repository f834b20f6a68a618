"""Detectors for :class:`~contextkit.compressors.redact.PIIRedactor`: the shared text scan, and
the EMAIL, PHONE, CARD, IBAN and IP detectors with their checks (Luhn, card IIN ranges, IBAN
lengths and mod-97). The SECRET detectors are in :mod:`contextkit.compressors._pii_secrets`;
what each kind covers and deliberately leaves alone is in :mod:`contextkit.compressors.redact`.
"""

from __future__ import annotations

import ipaddress
import re

# Ranks for overlap resolution: lower wins.
# A national identifier outranks a card (a labelled 12-digit Aadhaar can pass Luhn too); a date of
# birth outranks the numbers inside it; names and addresses from an NER backend lose to every pattern.
(_R_PEM, _R_KEY, _R_EMAIL, _R_IBAN, _R_ID, _R_CARD, _R_DOB, _R_IP, _R_PHONE, _R_ASSIGN, _R_GENERIC,
 _R_NER) = range(12)

Candidate = tuple[int, int, str, str, int]  # start, end, kind, detector, rank


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


#: IIN prefix ranges ``(prefix digits, first, last, network)``, tried in this order: the first
#: range that holds the number's prefix names its network, whose lengths then decide.
_IIN_RANGES = (
    (1, 4, 4, "visa"),
    (2, 51, 55, "mastercard"), (4, 2221, 2720, "mastercard"),
    (2, 34, 34, "amex"), (2, 37, 37, "amex"),
    (4, 2200, 2204, "mir"),
    (4, 6011, 6011, "discover"), (3, 644, 649, "discover"), (2, 65, 65, "discover"),
    (6, 622126, 622925, "discover"),
    (4, 2131, 2131, "jcb15"), (4, 1800, 1800, "jcb15"), (2, 35, 35, "jcb"),
    (3, 300, 305, "diners"), (4, 3095, 3095, "diners"), (2, 36, 36, "diners"), (2, 38, 39, "diners"),
    (2, 62, 62, "unionpay"),
    *((4, p, p, "maestro") for p in (5018, 5020, 5038, 5893, 6304, 6759, 6761, 6762, 6763, 6390, 604)),
    (2, 50, 50, "maestro"), (2, 56, 58, "maestro"), (1, 6, 6, "maestro"),
)
_CARD_LENGTHS = {"visa": (13, 16, 19), "mastercard": (16,), "amex": (15,), "mir": range(16, 20),
                 "discover": range(16, 20), "jcb": range(16, 20), "jcb15": (15,), "diners": range(14, 20),
                 "unionpay": range(16, 20), "maestro": range(12, 20)}
#: Words that make a number a product code, not a card: barcodes (EAN, UPC, GTIN), books, orders.
_BARCODE_CONTEXT = re.compile(
    r"(?i:\b(?:ean|ean-?1[34]|ean-?8|upc|upc-?a|gtin|isbn|issn|barcode|bar code|sku|order|invoice|"
    r"tracking|serial|imei|pmid)\b)[^\w\n]{0,6}(?:no\.?|nr\.?|number|code|#)?"
    r"[^\w\n]{0,4}\Z")


def _gs1_ok(digits: str) -> bool:
    """The GS1 check digit (EAN-8/13, UPC-A, GTIN-14): weights 3 and 1 from the right."""
    total = sum((3 if i % 2 else 1) * (ord(ch) - 48) for i, ch in enumerate(reversed(digits)))
    return total % 10 == 0


_CARD_WORD = re.compile(r"(?i:card|visa|maestro|master|amex|credit|debit|kort|karte|carte|tarjeta|cart[aã]o|"
                        r"karta|kaart|\bcc\b|\bpan\b|paid|pay)")


#: Words near a bare number that make it a product's barcode (before or after it, in the same sentence).
_PRODUCT_CONTEXT = re.compile(r"(?i:\b(?:scan(?:ned|s|ning)?|till|checkout|barcodes?|products?|articles?|"
                              r"artikel|shelf|shelves|packs?|packages?|packaging|box(?:es)?|labels?|gtin|ean|upc)\b)")


def _barcode(text: str, s: int, e: int, digits: str) -> bool:
    """A barcode or product number rather than a card: any number after a barcode or order word, or an
    unseparated GS1-valid UPC-A / EAN-13 (12 or 13 digits) with a product word near it ("scan ... at the
    till") and no card word before it.

    A 13-digit Visa or a 12/13-digit Maestro whose digits also pass the GS1 check (one in ten) is
    equally a barcode; with nothing around it to tell, it is masked as a card: redaction keeps a
    card out of the prompt at the cost of such a barcode (label it "EAN ..." to keep it)."""
    before = text[max(0, s - 40):s]
    if _BARCODE_CONTEXT.search(before):
        return True
    if len(digits) not in (12, 13) or e - s != len(digits) or not _gs1_ok(digits) or _CARD_WORD.search(before):
        return False
    return bool(_PRODUCT_CONTEXT.search(before) or _PRODUCT_CONTEXT.search(text[e:e + 40]))


def _card_brand(d: str) -> str | None:
    """The card network of a digit string by its IIN prefix and length, or None."""
    for digits, first, last, network in _IIN_RANGES:
        if first <= int(d[:digits]) <= last:
            return network if len(d) in _CARD_LENGTHS[network] else None
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


# ------------------------------------------------------------- detectors
# A detector takes a ``_Scan`` of the text and returns candidates (start, end, kind,
# detector, rank). Python's regex engine skips ahead quickly only to a literal, not to a
# character class (a bare r"\d" scan is slow per MB: ``python bench/bench_redact.py``), so nothing scans the whole
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
_NUMERIC = re.compile(rb"0[0 ().\-/+]{5,}")  # from a digit, a run that could hold a phone, card or IPv4
_IBAN_START = re.compile(rb"AA00")  # two capitals, two digits


class _Scan:
    """One text and what several detectors share: its UTF-8 and folded forms, numeric runs."""

    __slots__ = ("text", "raw", "ascii", "_folded", "_lower", "_regions")

    def __init__(self, text: str) -> None:
        self.text = text
        self.raw = text.encode("utf-8", "surrogatepass")
        self.ascii = len(self.raw) == len(text)
        self._folded: bytes | None = None
        self._lower: bytes | None = None
        self._regions: list[tuple[int, int]] | None = None

    @property
    def folded(self) -> bytes:
        if self._folded is None:
            self._folded = self.raw.translate(_FOLD)
        return self._folded

    @property
    def lower(self) -> bytes:
        """The UTF-8 form lower-cased in ASCII only, so byte offsets stay those of ``raw``."""
        if self._lower is None:
            self._lower = self.raw.lower()
        return self._lower

    def find_all(self, stems: tuple[bytes, ...]) -> list[int]:
        """Character offsets where one of ``stems`` (lower-case literals) starts a word, sorted."""
        lower = self.lower
        hits: set[int] = set()
        for stem in stems:  # one literal search each: faster than an alternation
            i = lower.find(stem)
            while i >= 0:
                if i == 0 or not (lower[i - 1:i].isalnum() or lower[i - 1:i] == b"_"):
                    hits.add(i)
                i = lower.find(stem, i + 1)
        offsets = sorted(hits)
        if offsets and not self.ascii:
            index = self.char_index(offsets)
            offsets = [index[b] for b in offsets]
        return offsets

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
    r"(?:[^\W_](?:[\w\-]{0,61}[^\W_])?\.)+[^\W\d_]{2,24}(?!\w|\.[^\W_])"  # "...uk-1", "...com.ck-index" end there
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


_CARD = re.compile(r"\d\d{1,5}(?:[ \-]\d{1,6}){1,5}|\d{12,19}")
_DIGIT_RUN = re.compile(r"\d+")


def _find_card(scan: _Scan) -> list[Candidate]:
    text = scan.text
    out: list[Candidate] = []
    for lo, hi in scan.regions:
        if hi - lo < 12:
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
                run = _DIGIT_RUN.match(m.group())
                assert run is not None  # every _CARD match starts with a digit
                pos = m.start() + len(run.group())
    return out


def _card_in(text: str, m: re.Match[str]) -> Candidate | None:
    base = m.start()
    groups = [(g.start() + base, g.end() + base) for g in _DIGIT_RUN.finditer(m.group())]
    if len(groups) == 1:
        s, e = groups[0]
        return (s, e, "CARD", "card", _R_CARD) if _is_card(text, s, e, text[s:e]) else None
    for i in range(len(groups)):
        if groups[i][1] - groups[i][0] != 4:  # printed card numbers start with a group of four
            continue
        for j in range(len(groups) - 1, i, -1):
            if _card_groups(text, groups, i, j):
                return (groups[i][0], groups[j][1], "CARD", "card", _R_CARD)
    return None


def _card_groups(text: str, groups: list[tuple[int, int]], i: int, j: int) -> bool:
    """Whether digit groups ``i..j`` print one card number: one separator, group sizes, a whole run."""
    s, e = groups[i][0], groups[j][1]
    sep = text[groups[i][1]]
    if len({text[groups[k][1]] for k in range(i, j)}) != 1:
        return False  # one kind of separator throughout
    if any(not 3 <= b - a <= 6 for a, b in groups[i + 1 : j]) or not 1 <= e - groups[j][0] <= 6:
        return False  # groups of three to six digits after the first; the last may be shorter
    if text[s - 1:s] == sep and _after_group(text, s - 1):
        return False  # a printed card number starts its run of groups: "DE59 2344 8783 ..." is not one
    if j + 1 < len(groups) and text[e] == sep and not _joined(text, groups[j + 1][1]):
        return False  # and ends it: "4121 1488 0508 6371 414" is a 19-digit number, not a card + 414
    return _is_card(text, s, e, "".join(text[a:b] for a, b in groups[i : j + 1]))


def _is_card(text: str, s: int, e: int, digits: str) -> bool:
    """12 to 19 digits standing alone, with a known network's prefix and length and a valid Luhn check,
    not after a barcode, book or order word."""
    return 12 <= len(digits) <= 19 and _digit_boundary_ok(text, s, e) and bool(_card_brand(digits)) \
        and _luhn_ok(digits) and not _barcode(text, s, e, digits)


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
    out = _find_ipv4(scan)
    if "::" in scan.text or scan.text.count(":") >= 7:
        out += _find_ipv6(scan.text)
    return out


def _find_ipv4(scan: _Scan) -> list[Candidate]:
    text = scan.text
    out: list[Candidate] = []
    for lo, hi in scan.regions:
        for m in _IPV4.finditer(text, lo, hi):
            s, e = m.span()
            if _IPV4_STRICT.fullmatch(m.group()) and _ipv4_stands_alone(text, s, e):
                out.append((s, e, "IP", "ipv4", _R_IP))
    return out


def _ipv4_stands_alone(text: str, s: int, e: int) -> bool:
    """Not part of a word, a longer dotted chain or a version number ("version 1.2.3.4", "Section 6.3.2.3")."""
    if s > 0 and (_is_word(text[s - 1]) or text[s - 1] in ".-"):
        return False
    if e < len(text) and (_is_word(text[e]) or (text[e] == "." and e + 1 < len(text) and text[e + 1].isalnum())):
        return False
    return not _VERSION_CONTEXT.search(text, max(0, s - 12), s)


def _find_ipv6(text: str) -> list[Candidate]:
    out: list[Candidate] = []
    last_end = 0
    for h in _IPV6_HINT.finditer(text):
        if h.start() < last_end:
            continue
        found = _ipv6_candidate(text, h.start())
        if found is None:
            continue
        s, e, cand = found
        last_end = max(last_end, e)
        if _is_ipv6(text, s, e, cand):
            out.append((s, e, "IP", "ipv6", _R_IP))
    return out


def _ipv6_candidate(text: str, hint: int) -> tuple[int, int, str] | None:
    """The address-shaped text around the hint at ``hint`` (up to four hex digits before it), a lone final colon off."""
    start = hint
    while start > 0 and start > hint - 4 and text[start - 1] in _HEX:
        start -= 1
    m = _IPV6.match(text, start)
    if m is None:
        return None
    s, e = m.span()
    cand = m.group()
    if cand.endswith(":") and not cand.endswith("::"):
        cand, e = cand[:-1], e - 1
    return s, e, cand


def _is_ipv6(text: str, s: int, e: int, cand: str) -> bool:
    """Whether ``cand`` at ``[s, e)`` stands alone and is a valid IPv6 address (not a slice, not a time)."""
    if cand.count(":") < 2 or (s > 0 and (_is_word(text[s - 1]) or text[s - 1] in ":.")):
        return False
    if e < len(text) and (_is_word(text[e]) or text[e] == ":"):
        return False
    addr = cand.split("%", 1)[0]
    groups = [g for g in re.split(r"[:.]", addr) if g]
    if len(groups) < 2 or max(map(len, groups)) < 3 or not any(ch.isdigit() for ch in addr):
        return False  # "ham[1::3]" is a slice; an address has a group of three hex digits or more
    try:
        ipaddress.IPv6Address(addr)
    except ValueError:
        return False
    return True


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
