"""DOB detector for :class:`~contextkit.compressors.redact.PIIRedactor`: a date of birth after a label.

Why a label. Dates are everywhere in text and most say nothing about a person (a study period,
a release, a law); redacting every date would blind the model. A date that follows a label of
birth ("DOB", "date of birth", "born on", "birthday", "né le", "geboren am", "Geburtsdatum",
"fecha de nacimiento", "nato il", "data de nascimento", "geboortedatum", "födelsedatum",
"дата рождения" ...) is a date of birth, and is masked whole.

What counts as a date: a full one, with a day, a month and a year (a bare year, "born in 1977",
is not masked): ``12/03/1980``, ``3-12-80``, ``12.03.1980``, ``1980-03-12``, ``1980/03/12``,
``12 March 1980``, ``12th of March, 1980``, ``March 12, 1980``, ``12. März 1980``,
``12 de marzo de 1980``, month names in English, French, German, Spanish, Italian, Portuguese and
Dutch (abbreviated or not). Numbers are checked: a day 1-31 and a month 1-12, in either order.
"""

from __future__ import annotations

import re

from contextkit.compressors._pii_detect import _R_DOB, Candidate, _Scan

#: Each label is matched from its last word ("date of birth" from "birth"), so one stem serves several
#: labels: every stem is one pass of ``bytes.find`` over the text.
_STEMS: tuple[bytes, ...] = (
    b"dob", b"d.o.b", b"birth", b"born", "né".encode(), b"naissance", b"geboren", b"geb.", b"geburts", b"nacimiento",
    b"nacid", b"nasci", b"nato ", b"nata ", b"geboortedatum", "födelsedatum".encode(), "рождения".encode(),
)
_LABEL = (r"d\.?o\.?b\.?|birth(?:[ \t]*(?:date|day))?|born(?:[ \t]+on)?|n[ée](?:e|\(e\))?[ \t]+le|naissance|"
          r"geboren(?:[ \t]+am)?|geb\.|geburts(?:datum|tag)|nacimiento|nacid[oa][ \t]+el|nasci(?:ta|mento|d[oa][ \t]+em)|"
          r"nat[oa][ \t]+il|geboortedatum|födelsedatum|рождения")
_FILL = r"(?:[ \t]*(?i:is|was|:|=|-|–|on|\([^()\n]{1,12}\)))*[ \t]*(?:\r?\n[ \t]*)?"  # "DOB (mm/dd/yyyy):"
_MONTHS = (r"jan(?:uary|vier|uar|\.)?|feb(?:ruary|ruar|\.)?|f[ée]v(?:rier|\.)?|m[aä]r(?:ch|s|z|\.)?|apr(?:il|\.)?|avr(?:il|\.)?|"
           r"may|mai|jun(?:e|i|\.)?|juin|jul(?:y|i|\.)?|juil(?:let|\.)?|aug(?:ust|\.)?|ao[uû]t|sep(?:t(?:ember|embre|\.)?|\.)?|"
           r"oct(?:ober|obre|\.)?|okt(?:ober|\.)?|nov(?:ember|embre|\.)?|de[cz](?:ember|embre|\.)?|d[ée]c(?:embre|\.)?|"
           r"enero|febrero|marzo|abril|mayo|junio|julio|agosto|septiembre|setiembre|octubre|noviembre|diciembre|"
           r"gennaio|febbraio|aprile|maggio|giugno|luglio|settembre|ottobre|dicembre|"
           r"janeiro|fevereiro|mar[çc]o|maio|junho|julho|setembro|outubro|novembro|dezembro|"
           r"januari|februari|maart|mei|juni|juli|augustus|oktober")
_DAY = r"(?:0?[1-9]|[12]\d|3[01])"
_DATE = (rf"(?P<num>\d{{1,2}}(?P<s>[./\-])\d{{1,2}}(?P=s)(?:\d{{4}}|\d\d)|\d{{4}}(?P<t>[./\-])\d{{1,2}}(?P=t)\d{{1,2}})"
         rf"|{_DAY}(?:st|nd|rd|th|er|\.)?[ \t]+(?:(?:of|de)[ \t]+)?(?i:{_MONTHS})\.?,?[ \t]+(?:de[ \t]+)?\d{{4}}"
         rf"|(?i:{_MONTHS})\.?[ \t]+{_DAY}(?:st|nd|rd|th)?,?[ \t]+\d{{4}}")
_PATTERN = re.compile(rf"(?i:{_LABEL})(?!\w){_FILL}(?P<v>{_DATE})(?![\w/\-]|[.:]\d)")


def _numeric_ok(v: str) -> bool:
    """Day and month in range, in either order (d/m/y, m/d/y, y-m-d)."""
    parts = [int(p) for p in re.split(r"[./\-]", v)]
    a, b = (parts[1], parts[2]) if len(str(parts[0])) == 4 or parts[0] > 31 else (parts[0], parts[1])
    return (1 <= a <= 12 and 1 <= b <= 31) or (1 <= b <= 12 and 1 <= a <= 31)


def find_dob(scan: _Scan) -> list[Candidate]:
    """Dates right after a birth label (see the module docstring)."""
    if b"0" not in scan.folded:  # a full date holds a digit (all digits fold to "0")
        return []
    text = scan.text
    out: set[Candidate] = set()
    for pos in scan.find_all(_STEMS):
        m = _PATTERN.match(text, pos)
        if m is None or (m.group("num") and not _numeric_ok(m.group("num"))):
            continue
        out.add((m.start("v"), m.end("v"), "DOB", "date_of_birth", _R_DOB))
    return sorted(out)
