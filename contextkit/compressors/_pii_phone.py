"""PHONE detector for :class:`~contextkit.compressors.redact.PIIRedactor`: Google's libphonenumber
(the ``phonenumbers`` port) over the regions the user names, with our own checks on top.

Why a library. Every country has its own numbering plan (lengths, trunk prefixes, how numbers
are grouped when printed) and they change; a hand-written pattern set covered US, UK, FR and DE
shapes and missed Swedish, Polish, Brazilian, Russian, Japanese, Australian and Dutch ones, and
NANP numbers with extensions. ``phonenumbers.PhoneNumberMatcher`` knows every plan.

How it runs over many regions without costing much. The matcher is pure Python (slow for each
call, even on a short string), so it never sees the whole text: the shared scan already holds the
*numeric runs* (digits, spaces and ``().-/+`` from a digit, see :class:`._pii_detect._Scan`);
only runs of seven digits or more are candidates, each widened over an extension (``x631``,
``ext. 12``, ``#4``). A run is given first to the matcher with the unknown region ``"ZZ"``, which
finds numbers in international form (``+CC ...``) whatever the region; then, for what is left, to
the matcher of each configured region in turn, until every digit of the run is in an accepted
number. Results are cached per run text, so a number repeated across a corpus is matched once.

Why our own checks on top. The matcher is run with leniency POSSIBLE (the number's length fits
the plan): generated and real numbers are often not *valid* (unassigned area codes), and a
redactor that misses a number because its area code is unassigned is wrong. POSSIBLE alone
accepts "2023-01-15" or "12 34 56 78" in half the world, so a match must also have the shape
of a phone number:

- international: ``+CC`` or an international call prefix (``00``, ``011``) - accepted as found;
- national, strong shape: a trunk prefix (``0``, Russia's ``8``), an area code in parentheses,
  NANP grouping ``(1-)XXX-XXX-XXXX``, an extension after it, or a phone word just before ("tel.", "phone", "call", "mobile",
  "Telefon", "телефон", "電話", ...), a line's label with the number on the next line ("Phone:\n467 3395"),
  a place's label ("Desk: 5403926876", "Office:", "Home:"), a request to be reached at it ("not answering
  at ...", "messages to ...", "my registered ..."), or a label word right after it ("2813882583 mobile",
  "(37) 788-063-Office") - accepted when possible;
- national, grouped digits without those marks (``609 141 777``): valid in the region
  (``is_valid_number``);
- one bare run of digits: 10 or 11 digits and a valid *mobile* number of the region
  (``15191417776``, ``3420837783``); bare 10-digit NANP numbers are not mobiles by type and stay.

Never a phone: dates (``2023-01-15``, ``01.02.2023``), times, digit groups of one digit after the
first (ISBNs ``0-306-40615-2``), the tail or middle of a longer run of digit groups, a number
glued to a word, or one right after a barcode or order word (EAN, UPC, ISBN, SKU, order,
invoice, tracking). ``phonenumbers`` is imported on the first text with a candidate run.
"""

from __future__ import annotations

import bisect
import re
from functools import lru_cache
from typing import Any

from contextkit.compressors._pii_detect import (
    _R_PHONE,
    Candidate,
    _after_group,
    _is_word,
    _Scan,
)

#: The regions tried by default, in order (the first region whose plan fits a number wins): the
#: 15+ locales of ``bench/bench_redact.py`` and their neighbours.
DEFAULT_PHONE_REGIONS: tuple[str, ...] = (
    "US", "CA", "GB", "IE", "AU", "NZ", "IN", "DE", "AT", "CH", "FR", "BE", "NL", "LU", "ES", "PT", "IT",
    "SE", "NO", "DK", "FI", "PL", "CZ", "SK", "HU", "RU", "UA", "TR", "GR", "BR", "MX", "AR", "JP", "KR",
    "CN", "ZA",
)

_EXT = re.compile(r"[ ]?(?:x|ext\.?|extn\.?|extension|#)[ ]?\d{1,6}(?!\w)", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
_IDD = re.compile(r"00[1-9]|011")
_CC_PAREN = re.compile(r"\((\d{1,3})\)(?= ?\d)")
_EIGHT = re.compile(r"\d\d( )\d\d\1\d\d\1\d\d|\d{3} \d\d \d{3}")
_AREA = re.compile(r"\(\+?\d{1,5}\)[ .\-]?\d")  # an area code in parentheses, then the number
_DATE = re.compile(r"\(?\d{1,4}\)?([-./])\d{1,2}\1\d{2,4}|\d{4}([-./])\d{2}|\d{1,2}([./])\d{1,2}")
_NANP = re.compile(r"(?:1[ .\-]?)?(?:\(\d{3}\)[ .\-]?|\d{3}(?P<s>[ .\-]))\d{3}(?(s)(?P=s)|[ .\-])\d{4}")
_RU = re.compile(r"8[ \-]?\(?\d{3,5}\)?[ \-]?\d{1,3}[ \-]?\d{2}[ \-]?\d{2}")
_PHONE_WORD = re.compile(
    r"(?:(?i:\b(?:tel|tél|tlf|mob|cell|fax|phone|telephone|téléphone|telefon|telefono|teléfono|telefone|"
    r"telefoon|puhelin|celular|handy|mobile|mobil|call|whatsapp|sms|dial|тел|телефон|моб)\b\.?|"
    r"電話|电话|手机|携帯|전화|☎|📞)[^\w\n]{0,12}(?:\w+[^\w\n]{1,3}){0,2}"
    # a line's label, then the number on the next line ("Phone:\n467 3395"); a place's label ("Desk: ...")
    r"|(?i:\b(?:tel|tél|phone|telephone|téléphone|telefon|mobile|mobil|cell|fax|desk|office|home|work|direct|"
    r"landline|contact)\b)\.?[ \t]*:[ \t]*(?:\r?\n[ \t]*)?"
    # asked to be reached at a number
    r"|(?i:\b(?:answering|reach(?:ed)?|text|message[sd]?|registered|ring)\b)[ \t]+(?:\w+[ \t]+){0,2}"
    r"(?i:at|on|to|number)[ \t]+|(?i:\bmy[ \t]+registered[ \t]+))\Z")
#: A label after the number: "2813882583 mobile", "(37) 788-063-Office", "416 60 039 office".
_PHONE_AFTER = re.compile(r"[ \t]*[-–]?[ \t]*(?i:office|fax|mobile|cell|home|work|desk|tel|phone|landline)\b")
_NOT_PHONE_WORD = re.compile(
    r"(?i:\b(?:ean|upc|gtin|isbn|issn|sku|order|invoice|tracking|barcode|pmid|doi|ticket|serial|build|version|"
    r"release|rev)\b)[^\w\n]{0,6}(?:#|no\.?|nr\.?|number)?[^\w\n]{0,4}\Z")


def _pn() -> Any:
    import phonenumbers

    return phonenumbers


def validate_regions(regions: tuple[str, ...]) -> tuple[str, ...]:
    """The regions upper-cased, checked against libphonenumber's list (raises ValueError)."""
    out = tuple(dict.fromkeys(str(r).upper() for r in regions))
    if out == DEFAULT_PHONE_REGIONS:
        return out
    unknown = sorted(set(out) - set(_pn().SUPPORTED_REGIONS))
    if unknown:
        raise ValueError(f"unknown phone regions {unknown}; use ISO 3166 codes such as 'US', 'DE', 'JP'")
    return out


#: Regions whose national numbers are often written without their trunk prefix (NANP's 1, Chinese
#: and Indian mobiles, Brazilian and Russian area codes).
_WRITTEN_WITHOUT_TRUNK = frozenset({"US", "CA", "CN", "IN", "BR", "RU", "AR", "MX"})
#: Where a phone number can start inside a numeric run: cheap shapes tried before the matcher.
_PLAUSIBLE = re.compile(r"\+\d|\(\+?\d{1,5}\)|(?<![\d.,])(?:0\d|8[ (\-]\(?\d)|"
                        r"(?<![\d.,])\d{2,4}[ \-]\d{2,4}[ \-]\d{2,5}|\d{3}\.\d{3}\.\d{4}|(?<![\d.,])\d{10,11}(?![\d.,])")


#: Grouped or bare digits with no trunk prefix, "+", IDD or parentheses that could still be a number.
_UNMARKED = re.compile(r"(?<![\d.,])(?:\d{2,4}(?P<s>[ \-])\d{2,5}(?:(?P=s)\d{2,5}){0,3}|\d{2} \d{4,5}-\d{4}|\d{10,11})"
                       r"(?![\d.,])")


class _Regions:
    """The configured regions, grouped by the first digit of their trunk prefix (computed once)."""

    def __init__(self, regions: tuple[str, ...]) -> None:
        pn = _pn()
        self.all = regions
        self.by_lead: dict[str, tuple[str, ...]] = {}
        trunks = {}
        for r in regions:
            meta = pn.PhoneMetadata.metadata_for_region(r)
            trunks[r] = (meta.national_prefix or "") if meta is not None else ""
        bare = tuple(r for r in regions if not trunks[r] or r in _WRITTEN_WITHOUT_TRUNK)
        for lead in "0123456789":
            with_trunk = tuple(r for r in regions if trunks[r][:1] == lead)
            self.by_lead[lead] = with_trunk + tuple(r for r in bare if r not in with_trunk)
        self.trunks = trunks

    def for_run(self, snippet: str, labelled: bool) -> list[str]:
        """The regions worth matching ``snippet`` in: "ZZ" (international) when it holds a "+", the
        regions whose trunk prefix starts it, and those that write numbers without one."""
        out = ["ZZ"] if "+" in snippet else []
        digits = "".join(_DIGITS.findall(snippet))
        if digits.startswith("011"):
            out.append("US")
        elif _IDD.match(digits):
            out.append("DE")
        if labelled:
            return out + [r for r in self.all if r not in out]
        bare = bool(_UNMARKED.search(snippet))  # worth the regions that write numbers without a trunk prefix
        first = _DIGITS.search(snippet)
        for lead in (first.group()[:1],) if first else ():
            out += [r for r in self.by_lead.get(lead, ()) if r not in out and (bare or self.trunks[r][:1] == lead)]
        if not bare and "US" in self.all and "US" not in out and _NANP.search(snippet):
            out.append("US")
        return out


def phone_finder(regions: tuple[str, ...]) -> Any:
    """A detector over ``regions`` (a closure with its own cache of runs already matched)."""
    groups: list[_Regions] = []  # built on the first candidate run: phonenumbers is imported then

    @lru_cache(maxsize=8192)
    def match_run(snippet: str, labelled: bool) -> tuple[tuple[int, int], ...]:
        if not labelled and not _PLAUSIBLE.search(snippet):
            return ()
        if not groups:
            groups.append(_Regions(regions))
        return _match_run(snippet, labelled, groups[0])

    def find(scan: _Scan, found: list[Candidate] = ()) -> list[Candidate]:  # type: ignore[assignment]
        text = scan.text
        out: list[Candidate] = []
        taken = sorted((c[0], c[1]) for c in found)  # cards, IBANs, IPs found already outrank a phone
        starts = [a for a, _ in taken]
        for lo, hi in scan.regions:
            if lo > 0 and _is_word(text[lo - 1]):  # glued to a word ("NCT00003026"): from its next group on
                while lo < hi and text[lo] not in " -/(+":
                    lo += 1
            if text[lo:lo + 1] == "(" and not _CC_PAREN.match(text, lo) and not _AREA.match(text, lo):
                lo += 1  # "(937-735-2215)": a number in parentheses, not an area code
            i = bisect.bisect_right(starts, lo)
            if i and taken[i - 1][1] >= hi:
                continue  # inside a card, an IBAN or an address
            n_digits = sum(ch.isdigit() for ch in text[lo:hi])
            if n_digits < 7:
                continue
            end = hi
            while end > lo and text[end - 1] in " .-/(":
                end -= 1
            ext = _EXT.match(text, end)
            if ext is not None:
                end = ext.end()
            before = text[max(0, lo - 40):lo]
            if _NOT_PHONE_WORD.search(before):
                continue
            labelled = (ext is not None or bool(_PHONE_WORD.search(before))  # an extension marks a phone too
                        or bool(_PHONE_AFTER.match(text, end)))
            if n_digits < (7 if labelled else 8):
                continue
            for a, b in match_run(text[lo:end], labelled):
                s, e = lo + a, lo + b
                if not _start_ok(text, s):
                    continue
                if not _end_ok(text, e):  # "555-123-4567 10.0.0.1": the matcher took the next group too
                    cut = text.rfind(" ", s, e)
                    shorter = match_run(text[s:cut], labelled) if cut > s else ()
                    if not shorter or shorter[0] != (0, cut - s):
                        continue
                    e = cut
                if text[s:e].isdigit() and not labelled and not _bare_ok(text, s, e):
                    continue
                out.append((s, e, "PHONE", "phone", _R_PHONE))
        return out

    return find


def _match_run(snippet: str, labelled: bool, regions: _Regions) -> tuple[tuple[int, int], ...]:
    """Accepted (start, end) spans in one numeric run (see the module docstring)."""
    pn = _pn()
    found: list[tuple[int, int, int]] = []  # -length, region order, index into spans
    spans: list[tuple[int, int]] = []
    digits_total = sum(ch.isdigit() for ch in snippet)
    for order, region in enumerate(regions.for_run(snippet, labelled)):
        for m in pn.PhoneNumberMatcher(snippet, region, leniency=pn.Leniency.POSSIBLE):
            if _shape_ok(pn, m.raw_string, m.number, region, labelled, regions.trunks.get(region, "")):
                spans.append((m.start, m.end))
                found.append((m.start - m.end, order, len(spans) - 1))
                if sum(ch.isdigit() for ch in m.raw_string) == digits_total:
                    return ((m.start, m.end),)  # the whole run is one number: no other region can do better
    cc = _CC_PAREN.match(snippet)
    if cc is not None and "+" not in snippet and int(cc.group(1)) in pn.COUNTRY_CODE_TO_REGION_CODE:
        alt = f"+{cc.group(1)} {snippet[cc.end():]}"  # "(351) 919660750": a country code in parentheses
        for m in pn.PhoneNumberMatcher(alt, "ZZ", leniency=pn.Leniency.POSSIBLE):
            if m.start == 0 and _shape_ok(pn, m.raw_string, m.number, "ZZ", labelled, ""):
                spans.append((0, m.end))
                found.append((-m.end, -1, len(spans) - 1))
    accepted: list[tuple[int, int]] = []
    for _, _, i in sorted(found):  # the longest first, then the earlier region
        s, e = spans[i]
        if not any(s < b and e > a for a, b in accepted):
            accepted.append((s, e))
    return tuple(sorted(accepted))


def _shape_ok(pn: Any, raw: str, number: Any, region: str, labelled: bool, trunk: str) -> bool:
    """Whether a possible number has the shape of a phone number (see the module docstring)."""
    ext = _EXT.search(raw)
    main = raw[:ext.start()] if ext else raw
    digits = "".join(_DIGITS.findall(main))
    if main.lstrip("( ").startswith("+"):
        return len(digits) >= 8
    if region != "ZZ" and _IDD.match(digits) and len(digits) >= 10:
        return True  # 00 49 ..., 011 44 ...: an international call prefix
    if region == "ZZ" or len(digits) < (7 if labelled else 8) or (_DATE.fullmatch(main) and not labelled):
        return False
    if len(digits) == 8 and not labelled:  # eight digits: only "12 34 56 78" / "123 45 678" shapes, valid
        return bool(_EIGHT.fullmatch(main)) and digits[0] != "0" and pn.is_valid_number(number)
    groups = [len(g) for g in _DIGITS.findall(main)]
    if len(groups) > 1 and min(groups[1:]) < 2:
        return False  # ISBN-like groups of one digit
    return labelled or _marked(main, groups, number, region, trunk) or _unmarked_ok(pn, main, digits, groups,
                                                                                   number, trunk)


def _marked(main: str, groups: list[int], number: Any, region: str, trunk: str) -> bool:
    """A national number with a mark of one: an area code in parentheses, the trunk prefix (dots between
    every group or none), NANP grouping, Russia's 8."""
    if _AREA.match(main):
        return True
    if trunk and main.lstrip("(")[:1] == trunk[0] and len(groups) > 1 and main.count(".") in (0, len(groups) - 1):
        return True
    return (number.country_code == 1 and bool(_NANP.fullmatch(main))) or (region == "RU" and bool(_RU.fullmatch(main)))


def _unmarked_ok(pn: Any, main: str, digits: str, groups: list[int], number: Any, trunk: str) -> bool:
    """Grouped digits with no mark: valid in the region; one bare run: a valid mobile, or a valid
    number after the trunk prefix, of 10 or 11 digits."""
    if len(groups) > 1:
        return len(digits) <= 12 and bool(_UNMARKED.fullmatch(main)) and pn.is_valid_number(number)
    if not 10 <= groups[0] <= 11 or not pn.is_valid_number(number):
        return False
    return (trunk != "" and digits.startswith(trunk)) or pn.number_type(number) == pn.PhoneNumberType.MOBILE


_UNIT = re.compile(r"[ \t]?(?i:hz|khz|mhz|ghz|b|kb|mb|gb|tb|bytes?|bits?|ms|ns|us|s|sec|seconds?|px|pt|mm|cm|m|km|kg|g|"
                   r"usd|eur|gbp|jpy|€|\$|%)(?!\w)")


def _bare_ok(text: str, s: int, e: int) -> bool:
    """One run of digits: not code (after "=", in quotes or backticks), not binary, not a quantity (Hz, MB, ms)."""
    if set(text[s:e]) <= {"0", "1"}:
        return False
    before = text[max(0, s - 3):s].rstrip()
    if before[-1:] in ("=", "`", "'", '"', "[", "{", ",", "#", "$", "€", "£", "¥") or text[e:e + 1] in ("`", "'", '"', "]"):
        return False
    return not _UNIT.match(text, e)


def _start_ok(text: str, s: int) -> bool:
    """Not glued to a word, not inside a dotted chain, not the tail of a longer run of digit groups."""
    if s == 0:
        return True
    p = text[s - 1]
    if _is_word(p) or p == "+":
        return False
    if p in ".-/,)" and s > 1 and text[s - 2].isdigit():
        return False
    if p in "-_/#:" and s > 1 and text[s - 2].isalnum():
        return False  # "INV-0238-44599", "ref/0171 1234567": part of a code
    return not (p == " " and _after_group(text, s - 1))


def _end_ok(text: str, e: int) -> bool:
    """Not glued to a word, a decimal, a time or a further digit group ("4121 1488 0508 6371 414")."""
    if e >= len(text):
        return True
    n = text[e]
    if _is_word(n) or n == "(":
        return False
    if n in ".-/:" and e + 1 < len(text) and text[e + 1].isdigit():
        return False
    if n == " " and e + 1 < len(text) and text[e + 1].isdigit():  # a further group of three digits or more
        k = e + 1
        while k < len(text) and text[k].isdigit():
            k += 1
        return k - e - 1 < 3 or (k < len(text) and text[k] in ".:,/" and text[k + 1:k + 2].isdigit())
    return True
