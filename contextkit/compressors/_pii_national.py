"""ID detector for :class:`~contextkit.compressors.redact.PIIRedactor`: national identifiers with
their validity rules, and US driver's licences after a label.

Why a check and, for most, a label. A national identifier is a number; science text, code and
order records are full of numbers of the same length. Each kind is accepted only when it passes
its own rules (a checksum where the scheme has one), and the kinds whose shape is common (nine
or eleven bare digits: one in ten random numbers passes a Luhn or mod-11 check) only after a
label naming them ("SSN:", "social insurance number", "Steuer-ID", "Aadhaar"...):

=================  ==============================================  ======================
detector           rules                                           label
=================  ==============================================  ======================
``us_ssn``         area 001-899 but 666, group 01-99, serial       no for ``NNN-NN-NNNN``;
                   0001-9999, not one repeated digit               yes otherwise
``us_itin``        9NN-GG-NNNN, group 50-65, 70-88, 90-92, 94-99   as ``us_ssn``
``uk_nino``        two prefix letters (not D F I Q U V, second     no when spaced
                   not O; not BG GB KN NK NT TN ZZ), six digits,   ``AB 12 34 56 C``; yes
                   suffix A-D                                      when compact (drug
                                                                   codes: ``SR141716A``)
``ca_sin``         Luhn, first digit not 0 or 8                    yes
``in_aadhaar``     12 digits, first 2-9, Verhoeff check digit      yes
``de_steuer_id``   11 digits, first not 0, one digit twice or      yes
                   three times in the first ten, ISO 7064
                   MOD 11,10 check digit
``fr_nir``         sex 1-4/7/8, month, department (2A/2B),         no when grouped
                   key = 97 - (number mod 97)                      ``1 85 05 78 006 084 36``
                                                                   or 15 bare digits (Corsica's
                                                                   2A/2B: yes)
``es_dni``         8 digits and the mod-23 letter; NIE X/Y/Z +     no when written whole
                   7 digits + letter                               (``12345678Z``)
``it_cf``          codice fiscale: 16 characters, month letter,    no
                   the odd/even check letter (omocodia letters
                   after a label)
``us_dl``          state formats vary: 5-22 letters, digits and    yes ("driver's
                   dashes with a digit                             license", "DL #")
=================  ==============================================  ======================

How it runs. Unlabelled forms are found on the folded copy of the text (see
:class:`._pii_detect._Scan`), where each pattern starts with a literal; labels with one
``bytes.find`` per label stem; each value is checked only at those places.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

from contextkit.compressors._pii_detect import _R_DOB, _R_ID, Candidate, _luhn_ok, _Scan

#: The rank of a national identifier found without its label: after a card (see :func:`_find_unlabelled`).
_R_UNLABELLED = _R_DOB

ID_DETECTORS: tuple[str, ...] = ("us_ssn", "us_itin", "uk_nino", "ca_sin", "in_aadhaar", "de_steuer_id",
                                 "fr_nir", "es_dni", "it_cf", "us_dl")

# ------------------------------------------------------------------ checks
_ITIN_GROUPS = frozenset([*range(50, 66), *range(70, 89), 90, 91, 92, *range(94, 100)])


def _ssn_ok(d: str) -> bool:
    return (len(d) == 9 and d.isdigit() and d[0] != "9" and d[:3] not in ("000", "666") and d[3:5] != "00"
            and d[5:] != "0000" and len(set(d)) > 1)


def _itin_ok(d: str) -> bool:
    return len(d) == 9 and d.isdigit() and d[0] == "9" and int(d[3:5]) in _ITIN_GROUPS


def _us_tax_id(d: str) -> str | None:
    """``us_ssn`` or ``us_itin`` for nine digits that pass the one's rules, else None."""
    return "us_ssn" if _ssn_ok(d) else "us_itin" if _itin_ok(d) else None


_NINO = re.compile(r"(?![DFIQUV])[A-Z](?![DFIOQUV])[A-Z]\d{6}[A-D]")
_NINO_BAD_PREFIX = frozenset({"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"})


def _nino_ok(v: str) -> bool:
    return bool(_NINO.fullmatch(v)) and v[:2] not in _NINO_BAD_PREFIX


def _sin_ok(d: str) -> bool:
    return len(d) == 9 and d.isdigit() and d[0] not in "08" and _luhn_ok(d)


_VERHOEFF_D = (
    (0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 3, 4, 0, 6, 7, 8, 9, 5), (2, 3, 4, 0, 1, 7, 8, 9, 5, 6),
    (3, 4, 0, 1, 2, 8, 9, 5, 6, 7), (4, 0, 1, 2, 3, 9, 5, 6, 7, 8), (5, 9, 8, 7, 6, 0, 4, 3, 2, 1),
    (6, 5, 9, 8, 7, 1, 0, 4, 3, 2), (7, 6, 5, 9, 8, 2, 1, 0, 4, 3), (8, 7, 6, 5, 9, 3, 2, 1, 0, 4),
    (9, 8, 7, 6, 5, 4, 3, 2, 1, 0))
_VERHOEFF_P = (
    (0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 5, 7, 6, 2, 8, 3, 0, 9, 4), (5, 8, 0, 3, 7, 9, 6, 1, 4, 2),
    (8, 9, 1, 6, 0, 4, 3, 5, 2, 7), (9, 4, 5, 3, 1, 2, 6, 8, 7, 0), (4, 2, 8, 6, 5, 7, 3, 9, 0, 1),
    (2, 7, 9, 3, 8, 0, 6, 4, 1, 5), (7, 0, 4, 6, 9, 1, 3, 2, 5, 8))


def verhoeff_ok(d: str) -> bool:
    c = 0
    for i, ch in enumerate(reversed(d)):
        c = _VERHOEFF_D[c][_VERHOEFF_P[i % 8][ord(ch) - 48]]
    return c == 0


def _aadhaar_ok(d: str) -> bool:
    return len(d) == 12 and d.isdigit() and d[0] not in "01" and verhoeff_ok(d)


def steuer_id_check(d10: str) -> int:
    """The ISO 7064 MOD 11,10 check digit of the first ten digits of a Steuer-ID."""
    product = 10
    for ch in d10:
        total = (int(ch) + product) % 10 or 10
        product = total * 2 % 11
    return (11 - product) % 10


def _steuer_ok(d: str) -> bool:
    if len(d) != 11 or not d.isdigit() or d[0] == "0":
        return False
    repeats = [n for n in Counter(d[:10]).values() if n > 1]
    return len(repeats) == 1 and repeats[0] in (2, 3) and steuer_id_check(d[:10]) == int(d[10])


_NIR = re.compile(r"[1-478]\d\d(?:0[1-9]|1[0-2]|[2-9]\d)(?:\d\d|2[AB])\d{8}")


def nir_key(body13: str) -> int:
    """The key of a French NIR: 97 - (number mod 97), Corsica's 2A / 2B read as 19 / 18."""
    return 97 - int(body13.replace("2A", "19", 1).replace("2B", "18", 1)) % 97


def _nir_ok(v: str) -> bool:
    return len(v) == 15 and bool(_NIR.fullmatch(v)) and nir_key(v[:13]) == int(v[13:])


_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def _dni_ok(v: str) -> bool:
    if len(v) != 9 or not v[-1].isupper():
        return False
    body = v[:8]
    if body[0] in "XYZ":
        body = str("XYZ".index(body[0])) + body[1:]
    return body.isdigit() and _DNI_LETTERS[int(body) % 23] == v[-1]


_CF_ODD = dict(zip("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ",
                   (1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 2, 4, 18, 20, 11, 3, 6, 8,
                    12, 14, 16, 10, 22, 25, 24, 23), strict=True))
_CF = re.compile(r"[A-Z]{6}[\dLMNPQRSTUV]{2}[ABCDEHLMPRST][\dLMNPQRSTUV]{2}[A-Z][\dLMNPQRSTUV]{3}[A-Z]")


def cf_check(body15: str) -> str:
    """The check letter of an Italian codice fiscale (odd positions by table, even by value)."""
    total = 0
    for i, ch in enumerate(body15):
        total += _CF_ODD[ch] if i % 2 == 0 else (int(ch) if ch.isdigit() else ord(ch) - 65)
    return chr(65 + total % 26)


def _cf_ok(v: str) -> bool:
    return bool(_CF.fullmatch(v)) and cf_check(v[:15]) == v[15]


def _dl_ok(v: str) -> bool:
    compact = v.replace("-", "")
    return 5 <= len(compact) <= 22 and any(ch.isdigit() for ch in compact) and "--" not in v


# ------------------------------------------------------------------ labelled values
# After a label: "number", "no.", "#", "is", ":" and the like, in any order, and one line break.
_FILL = (r"(?:[ \t]*(?i:\((?:ssn|itin|tin|nino|sin|nas|dni|nie|nif|dl|dln|id|idnr|nir)\)|numbers?|no\.?|nr\.?|num\.?|"
         r"n°|nº|#|is|was|are|:|=|-|–|of|card|id))*[ \t]*(?:\r?\n[ \t]*)?")
_END = r"(?![\w\-/]|[.,]\d)"


def _labelled(label: str, value: str) -> re.Pattern[str]:
    return re.compile(rf"(?i:{label})(?!\w){_FILL}(?P<v>{value}){_END}")


_Check = Callable[[str], "str | None"]
_SEPARATORS = str.maketrans("", "", " -/")


def _compact(v: str) -> str:
    return v.translate(_SEPARATORS).upper()


_TAX_SEPS = r"\d{3}(?P<s>[- ]?)\d{2}(?P=s)\d{4}"
#: (label stems, label + value pattern, check of the value as written -> detector or None)
_LABELLED: tuple[tuple[tuple[bytes, ...], re.Pattern[str], _Check], ...] = (
    ((b"ssn", b"social security", b"soc", b"itin", b"individual taxpayer", b"taxpayer"),
     _labelled(r"ssn|social[ \t]+security|soc\.?[ \t]*sec\.?|itin|individual[ \t]+taxpayer[ \t]+identification|"
               r"taxpayer[ \t]+id(?:entification)?", _TAX_SEPS), lambda v: _us_tax_id(_compact(v))),
    ((b"national insurance", b"nino", b"ni number", b"ni no"),
     _labelled(r"national[ \t]+insurance|nino|ni[ \t]+(?:number|no\b\.?)", r"[A-Za-z]{2}(?P<s> ?)\d\d(?P=s)\d\d(?P=s)"
               r"\d\d(?P=s)[A-Da-d]"), lambda v: "uk_nino" if _nino_ok(_compact(v)) else None),
    ((b"sin", b"social insurance", b"assurance sociale", b"nas"),
     _labelled(r"sin|social[ \t]+insurance|(?:num[ée]ro[ \t]+d'|d')?assurance[ \t]+sociale|nas",
               r"\d{3}(?P<s>[- ]?)\d{3}(?P=s)\d{3}"), lambda v: "ca_sin" if _sin_ok(_compact(v)) else None),
    ((b"aadhaar", b"aadhar", b"uidai"),
     _labelled(r"aadhaa?r|uidai", r"\d{4}(?P<s>[- ]?)\d{4}(?P=s)\d{4}"),
     lambda v: "in_aadhaar" if _aadhaar_ok(_compact(v)) else None),
    ((b"steuer", b"idnr", b"identifikationsnummer", b"tax id"),
     _labelled(r"steuer[\w\-]{0,30}|idnr\.?|identifikationsnummer|tax[ \t]+id(?:entification)?",
               r"\d(?:[ /]?\d){10}"), lambda v: "de_steuer_id" if _steuer_ok(_compact(v)) else None),
    ((b"s\xc3\xa9cu", b"secu", b"nir", b"insee", b"n\xc2\xb0 ss", b"n\xc2\xb0ss"),
     _labelled(r"s[ée]cu(?:rit[ée][ \t]+sociale)?|nir|insee|n°[ \t]*ss",
               r"[1-478](?: ?\d\d){2} ?(?:\d\d|2[AB]) ?\d{3} ?\d{3} ?\d\d"),
     lambda v: "fr_nir" if _nir_ok(_compact(v)) else None),
    ((b"dni", b"nie", b"nif", b"documento nacional"),
     _labelled(r"dni|nie|nif|documento[ \t]+nacional(?:[ \t]+de[ \t]+identidad)?",
               r"\d{8}[- ]?[A-Za-z]|[XYZxyz][- ]?\d{7}[- ]?[A-Za-z]"),
     lambda v: "es_dni" if _dni_ok(_compact(v)) else None),
    ((b"codice fiscale", b"cod. fisc", b"cod fisc"),
     _labelled(r"codice[ \t]+fiscale|cod\.?[ \t]*fisc\.?", r"[A-Za-z0-9]{16}"),
     lambda v: "it_cf" if _cf_ok(_compact(v)) else None),
    ((b"driver", b"driving", b"licen", b"dl", b"f\xc3\xbchrerschein", b"fuehrerschein"),
     _labelled(r"drivers?(?:'|’)?s?[ \t]+licen[cs]e|driving[ \t]+licen[cs]e|licen[cs]e[ \t]+(?:number|no\.?|#)|"
               r"dln?[ \t]*(?:#|no\.?|number|:)|f(?:ü|ue)hrerschein(?:nummer)?",
               r"[A-Z0-9*](?:[A-Z0-9\-*]{3,22})[A-Z0-9]"), lambda v: "us_dl" if _dl_ok(v) else None),
)


def _find_labelled(scan: _Scan) -> list[Candidate]:
    text = scan.text
    out: list[Candidate] = []
    for stems, pattern, check in _LABELLED:
        for pos in scan.find_all(stems):
            m = pattern.match(text, pos)
            if m is None:
                continue
            name = check(m.group("v"))
            if name is not None:
                out.append((m.start("v"), m.end("v"), "ID", name, _R_ID))
    return out


# ------------------------------------------------------------------ unlabelled values
#: (detector, literals on the folded text (every digit "0", every capital "A"), check of the value). Literals,
#: not alternations: a regex that starts with a literal is searched for at C speed, an alternation is not.
_UNLABELLED: tuple[tuple[str, tuple[re.Pattern[bytes], ...], Callable[[str], bool]], ...] = (
    ("us_ssn", (re.compile(rb"000-00-0000"),), lambda v: _us_tax_id(v.replace("-", "")) is not None),
    ("uk_nino", (re.compile(rb"AA 00 00 00 A"),), lambda v: _nino_ok(v.replace(" ", ""))),  # SR141716A is a drug
    ("fr_nir", (re.compile(rb"0 00 00 00 000 000 00"), re.compile(rb"000000000000000")),
     lambda v: _nir_ok(v.replace(" ", ""))),
    ("es_dni", (re.compile(rb"00000000A"), re.compile(rb"A0000000A")), _dni_ok),
    ("it_cf", (re.compile(rb"AAAAAA00A00A000A"),), _cf_ok),
)


def _find_unlabelled(scan: _Scan) -> list[Candidate]:
    text = scan.text
    out: list[Candidate] = []
    for name, patterns, check in _UNLABELLED:
        for pattern in patterns:
            for s, e in scan.spans(pattern, scan.folded):
                if _stands_alone(text, s, e) and check(text[s:e]):
                    # unlabelled, a card's number wins the span: a 15-digit Amex number can pass a French NIR's
                    # key too (1 in 97), and cards are far more common in text (labelled, the ID wins)
                    out.append((s, e, "ID", "us_itin" if name == "us_ssn" and text[s] == "9" else name, _R_UNLABELLED))
    return out


def _stands_alone(text: str, s: int, e: int) -> bool:
    """Not part of a longer word, number or dashed/dotted chain."""
    if s > 0 and (text[s - 1].isalnum() or text[s - 1] in "_-./" and s > 1 and text[s - 2].isalnum()):
        return False
    return not (e < len(text) and (text[e].isalnum() or text[e] in "_-/" and text[e + 1:e + 2].isalnum()))


def find_ids(scan: _Scan) -> list[Candidate]:
    """Every national identifier and labelled driver's licence in the text (see the module docstring)."""
    if b"0" not in scan.folded:  # every identifier holds a digit (all digits fold to "0"): most prose has none
        return []
    return sorted(set(_find_unlabelled(scan) + _find_labelled(scan)))  # two labels can name one value
