"""SECRET detectors for :class:`~contextkit.compressors.redact.PIIRedactor`: private-key PEM
blocks, named key formats, ``Bearer`` tokens, ``password=`` style assignments and the generic
detector of random-looking tokens, with the entropy and letter-pair checks it uses.

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
single English-looking piece of 7+ letters also clears the token). Most random
tokens pass; the share caught is measured by ``python bench/bench_redact.py``
(unlabelled random tokens).
"""

from __future__ import annotations

import bisect
import math
import re
import string
from collections import Counter
from collections.abc import Callable

from contextkit.compressors._pii_detect import (
    _IBAN_LENGTH,
    _R_ASSIGN,
    _R_GENERIC,
    _R_KEY,
    _R_PEM,
    Candidate,
    _is_word,
    _Scan,
)


# ------------------------------------------------------------- checks
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
# pairs make over half of all pairs there, each next band of 100 less; the other 426 of the 676
# possible pairs are rare. A pair scores 2, 1, 0 or -2 by its band: English words average well
# above zero a pair, uniformly random letters about -1.
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
    if _entropy(token) < threshold or _structured(token, classes, alnum):
        return False
    pieces = _CAMEL_PIECE.findall(token)
    words = [p for p in pieces if not p[0].isdigit()]
    if len(words) >= 3 and all(len(p) >= 3 and p[0].isupper() and p[1:].islower() for p in words):
        return False  # Gln356Pro871Glu1038, Model3Build12Patch7: capitalised words and numbers
    return not _reads_as_english(words)


def _structured(token: str, classes: str, alnum: int) -> bool:
    """Few class changes (an identifier), or short separated parts (cp33-cp33m-linux_x86_64)."""
    # class changes inside each separated part, not counting those of camelCase (Upper->lower and
    # lower->Upper->lower): 3-hydroxy-3-methylglutaryl and PyObject_GetAttr have none. No two-letter
    # pattern here can overlap itself, so str.count is exact; "lul" can ("lulul"), hence the lookahead.
    switches = sum(classes.count(pair) for pair in ("ld", "dl", "ud", "du", "lu")) - len(_CAMEL_HUMP.findall(classes))
    segments = [x for x in _SEPARATORS.split(token) if x]
    if switches / (alnum - len(segments)) < _SWITCH_SHARE:
        return True
    return len(segments) >= 4 and sum(map(len, segments)) <= 5 * len(segments)


def _reads_as_english(words: list[str]) -> bool:
    """Whether the letter pieces of a token read as English: one long English-looking word
    (CD14++CD16+monocytes), or enough letter pairs scoring high on average (identifiers)."""
    pairs = score = 0
    for piece in words:
        piece = piece.lower()
        piece_score = sum(_PAIR_SCORE.get(piece[i:i + 2], -2) for i in range(len(piece) - 1))
        if len(piece) >= 7 and piece_score >= _WORD_MEAN * (len(piece) - 1):
            return True
        pairs += len(piece) - 1
        score += piece_score
    return pairs >= _PAIRS_MIN and score >= _PAIRS_MEAN * pairs


def _pair_mean(token: str) -> float:
    """Average English score of the letter pairs inside the camelCase pieces of ``token``."""
    scores = [_PAIR_SCORE.get(p[i:i + 2], -2) for p in (x.lower() for x in _CAMEL_PIECE.findall(token))
              for i in range(len(p) - 1) if not p[0].isdigit()]
    return sum(scores) / len(scores) if scores else 0.0


def _values_random(value: str) -> bool:
    """A key body that mixes at least two of lower case, upper case and digits."""
    return len({_char_class(ch) for ch in value} - {0}) >= 2


# ------------------------------------------------------------- detectors
# How the byte scan works: see the comment above ``_Scan`` in _pii_detect.
_FOLD_TOKEN = bytes.maketrans(b"0123456789+/_=-" + bytes(range(65, 91)) + bytes(range(97, 123)), b"T" * 67)
_LONG_TOKEN = re.compile(rb"T" * 20 + rb"T*")  # 20+ characters of [A-Za-z0-9+/_=-]
_ASSIGN_STEMS = (b"pass", b"pwd", b"secret", b"token", b"credential", b"key")


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
    # hex bodies, which the generic detector skips by design: named here by their prefix
    ("twilio_account_sid", re.compile(r"AC[0-9a-f]{32}"), False),
    ("twilio_api_key", re.compile(r"SK[0-9a-f]{32}"), False),
    ("mailgun_key", re.compile(r"key-[0-9a-zA-Z]{32}"), False),
    ("shopify_token", re.compile(r"shp(?:at|ss|ca|pa)_[0-9a-fA-F]{32}"), False),
    ("digitalocean_token", re.compile(r"do[opr]_v1_[0-9a-f]{64}"), False),
    ("databricks_token", re.compile(r"dapi[0-9a-f]{32}(?:-\d)?"), False),
    ("pypi_token", re.compile(r"pypi-AgE[A-Za-z0-9_\-]{50,}"), False),
    ("square_token", re.compile(r"sq0(?:atp|csp)-[0-9A-Za-z_\-]{22,43}"), False),
    ("google_oauth_token", re.compile(r"ya29\.[0-9A-Za-z_\-]{30,}"), False),
    ("anthropic_key", re.compile(r"sk-ant-(?:api|admin)\d\d-[A-Za-z0-9_\-]{80,120}"), True),
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
    r"(?:(\"|')([^\"'\n\r<>]{4,200})\2|([^\s\"'<>,;\[\]{}`]{4,200}))"
)
_PLACEHOLDER_VALUE = re.compile(r"<[^<>]*>|\$\{[^}]*\}|\{\{.*\}\}|%(?:\(\w+\))?[sdr]|\.{3}|(?i:x{4,}|\*{3,}|none|null|"
                                r"true|false|changeme|your[_\- ].*|redacted|hidden)")
_CALL = re.compile(r"[A-Za-z_][\w.]*\(")
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
    if m.group(3) is not None:
        value = m.group(3)
        if not value.strip() or len(set(value)) == 1 or _PLACEHOLDER_VALUE.fullmatch(value):
            return None  # "<token>", "${TOKEN}", "xxxx", "your-api-key": a stand-in, not a value
        return (m.start(3), m.end(3), "SECRET", "assignment", _R_ASSIGN)
    vs, ve = m.span(4)
    value = m.group(4)
    while value and value[-1] in _TRAILING:
        value, ve = value[:-1], ve - 1
    if _CALL.match(value):
        return None  # password=get_password(user): code
    return (vs, ve, "SECRET", "assignment", _R_ASSIGN) if _bare_value(value, m.group(1)) else None


def _bare_value(value: str, sep: str) -> bool:
    """Whether an unquoted assigned value is a secret: not a stand-in, not prose, not code."""
    if len(value) < 6 or len(set(value)) == 1 or value[0] in "${" or _PLACEHOLDER_VALUE.fullmatch(value):
        return False
    has_digit = any(ch.isdigit() for ch in value)
    if sep == ":" and not has_digit:
        return False  # "Password: Click here", "secret:--nurse": prose
    if not has_digit and _NAMEISH.fullmatch(value):
        passphrase = value.isalpha() and value.islower() and len(value) >= 12
        random_letters = value.isalpha() and len(value) >= 8 and _pair_mean(value) < -0.5
        return passphrase or random_letters  # else password=user.password, token=getToken: code
    return True


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
