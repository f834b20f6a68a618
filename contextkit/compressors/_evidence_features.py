"""Per-sentence features for the learned evidence scorer (query relevance, context, form).

Why these: a bi-encoder cosine and term overlap alone keep about two thirds of
SciFact's rationale sentences at 2x, because background and methods sentences share
the claim's topic words as much as the finding does. What tells a finding apart is
partly *where* it is (results and conclusions come last, or under a ``RESULTS``
heading), partly *how* it is written (numbers, p-values, "we found", comparatives) and
partly its neighbours (a finding often follows a relevant sentence). Every feature is
computed from the passage alone and the query: no domain list of topics.

:func:`sentence_features` returns one row per sentence, columns in :data:`FEATURES`
order; the fitted weights name the columns they use, so a weights file stays readable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["FEATURES", "sentence_features"]

FEATURES: tuple[str, ...] = (
    "emb", "emb_gap", "emb_z", "emb_nb", "emb_pmax",
    "lex", "lex_gap", "lex_nb", "lex_pmax",
    "pos", "first", "last", "n_log", "words_log",
    "number", "stats", "finding", "comparative", "aim", "method", "background",
    "sec_background", "sec_aim", "sec_methods", "sec_results", "sec_conclusion", "heading",
    "emb_x_lex", "emb_x_pos",
)

_I = re.IGNORECASE
_NUMBER = re.compile(r"\d")
_STATS = re.compile(r"\b[Pp]\s*[<=>≤≥]|\d\s*%|\b(?:CI|OR|HR|RR|IQR|SD|SEM)\b|odds ratio|hazard ratio|"
                    r"relative risk|confidence interval|\bn\s*=", _I)
_FINDING = re.compile(
    r"\bwe (?:here )?(?:found|find|show|showed|demonstrate|demonstrated|report|observed|observe|identif\w+|"
    r"conclude|reveal\w*|establish\w*|provide evidence)\b|\b(?:results?|findings|data|analys[ie]s|study|studies) "
    r"(?:show|showed|shows|suggest|suggests|indicate|indicates|demonstrate|demonstrates|reveal\w*|support\w*|"
    r"confirm\w*|provide)\b|\b(?:suggest|suggests|indicate|indicates|demonstrate|demonstrates|reveal|reveals|"
    r"show|shows|showed) that\b|\bsignificant(?:ly)?\b|\bassociated with\b|\bwas (?:not )?(?:associated|"
    r"correlated|linked)\b|\b(?:in conclusion|taken together|together,|thus,|therefore,|overall,)", _I)
_COMPARATIVE = re.compile(
    r"\b(?:increas\w*|decreas\w*|reduc\w*|higher|lower|greater|fewer|less|more|improv\w*|inhibit\w*|enhanc\w*|"
    r"promot\w*|prevent\w*|impair\w*|requir\w*|essential|abolish\w*|block\w*|induc\w*|elevat\w*|"
    r"attenuat\w*|protect\w*|no (?:significant )?(?:difference|effect|association)|did not|does not|"
    r"was not|were not|compared with|versus|vs\.?)\b", _I)
_AIM = re.compile(
    r"\b(?:to (?:determine|assess|investigate|examine|evaluate|test|compare|explore|identify|estimate|"
    r"characteri[sz]e|address|study)|aims?\b|objectives?\b|purpose|here,? we (?:investigate|examine|ask|test|"
    r"explore|asked|tested)|we (?:sought|hypothesi[sz]ed|asked|investigated whether)|whether)", _I)
_METHOD = re.compile(
    r"\b(?:were|was) (?:randomi[sz]ed|enrolled|recruited|assessed|measured|analy[sz]ed|collected|performed|"
    r"used|obtained|included|followed|genotyped|treated|assigned|evaluated|examined|interviewed|identified)\b|"
    r"\bwe (?:used|performed|analy[sz]ed|conducted|examined|measured|assessed|studied|designed|developed|"
    r"generated|compared|applied|combined|evaluated)\b|\busing\b|\b(?:retrospective|prospective|cohort|"
    r"cross-sectional|randomi[sz]ed|double-blind|case-control|meta-analysis)\b|\bfollow-up\b", _I)
_BACKGROUND = re.compile(
    r"\b(?:remains? (?:unclear|unknown|poorly|elusive|controversial|to be)|little is known|is (?:not )?"
    r"(?:well )?(?:known|understood)|(?:has|have) been (?:shown|implicated|proposed|suggested|reported)|"
    r"is (?:a|an|one of the)|are (?:a|an)|plays? (?:a|an) (?:key |central |critical |important )?role|"
    r"however,)", _I)

_SECTIONS: dict[str, str] = {}
for _name, _words in (
    ("background", "BACKGROUND CONTEXT INTRODUCTION RATIONALE IMPORTANCE"),
    ("aim", "OBJECTIVE OBJECTIVES AIM AIMS PURPOSE GOAL GOALS QUESTION"),
    ("methods", "METHODS METHOD DESIGN SETTING SETTINGS PARTICIPANTS PATIENTS SUBJECTS INTERVENTION "
                "INTERVENTIONS MEASUREMENTS MEASURES MATERIALS SAMPLE SOURCES SELECTION EXTRACTION POPULATION "
                "OUTCOME OUTCOMES EXPOSURE EXPOSURES ANALYSIS PROCEDURES METHODOLOGY"),
    ("results", "RESULTS RESULT FINDINGS"),
    ("conclusion", "CONCLUSION CONCLUSIONS INTERPRETATION IMPLICATIONS SIGNIFICANCE DISCUSSION RELEVANCE"),
):
    for _w in _words.split():
        _SECTIONS[_w] = _name
#: A leading run of capitalised heading words ("DESIGN, SETTING, AND PARTICIPANTS", "Results:").
_HEADING = re.compile(r"((?:[A-Z]{2,}[,/&]?\s+(?:AND\s+|OF\s+)?){1,6})(?=\S)|([A-Z][a-z]+(?: [a-z]+){0,2}):\s")


def _section(sentence: str) -> str | None:
    m = _HEADING.match(sentence)
    if not m:
        return None
    words = re.findall(r"[A-Za-z]+", (m.group(1) or m.group(2) or "").upper())
    found = [_SECTIONS[w] for w in words if w in _SECTIONS]
    return found[-1] if found and (m.group(1) or len(words) <= 3) else None


def sentence_features(texts: Sequence[str], groups: Sequence[tuple[int, int]], emb: Sequence[float],
                      lex: Sequence[float]) -> list[list[float]]:
    """One row of :data:`FEATURES` per sentence; ``groups`` are ``(first, count)`` per passage.

    ``emb`` is each sentence's cosine with the query, ``lex`` its lexical coverage of
    the query; "gap" features are the distance to the passage's best sentence (a
    sentence competes first within its passage), "nb" the best neighbour's value.
    """
    rows: list[list[float]] = [[] for _ in texts]
    for first, count in groups:
        e = [float(v) for v in emb[first:first + count]]
        x = [float(v) for v in lex[first:first + count]]
        e_max, x_max = max(e, default=0.0), max(x, default=0.0)
        e_mean = sum(e) / count if count else 0.0
        e_sd = math.sqrt(sum((v - e_mean) ** 2 for v in e) / count) if count else 0.0
        section: str | None = None
        for i in range(count):
            text = texts[first + i]
            heading = _section(text)
            section = heading or section
            pos = i / (count - 1) if count > 1 else 1.0
            nb = [j for j in (i - 1, i + 1) if 0 <= j < count]
            rows[first + i] = [
                e[i], e[i] - e_max, (e[i] - e_mean) / (e_sd + 0.02), max((e[j] for j in nb), default=e[i]), e_max,
                x[i], x[i] - x_max, max((x[j] for j in nb), default=x[i]), x_max,
                pos, float(i == 0), float(i == count - 1), math.log(count), math.log1p(len(text.split())),
                float(bool(_NUMBER.search(text))), _hits(_STATS, text), _hits(_FINDING, text),
                _hits(_COMPARATIVE, text), _hits(_AIM, text), _hits(_METHOD, text), _hits(_BACKGROUND, text),
                *(float(section == s) for s in ("background", "aim", "methods", "results", "conclusion")),
                float(heading is not None),
                e[i] * x[i], e[i] * pos,
            ]
    return rows


def _hits(pattern: re.Pattern[str], text: str, cap: int = 3) -> float:
    """Matches of ``pattern`` in ``text``, capped: a count says more than a flag, a long list no more."""
    return float(min(sum(1 for _ in pattern.finditer(text)), cap))


def feature_matrix(rows: list[list[float]]) -> Any:
    """``rows`` as a float64 array (numpy imported here, not at module load)."""
    import numpy as np

    return np.asarray(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))
