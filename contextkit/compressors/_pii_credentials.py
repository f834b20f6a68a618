"""SECRET detectors for credentials written where the assignment detector does not look:
the password in a connection URL, a password told in a sentence, and token formats that need
a look around a literal in the middle (Telegram bot tokens, Mailchimp keys, webhook URLs).

- Connection URLs: ``scheme://user:password@host`` for any scheme (``postgres``,
  ``postgresql``, ``mysql``, ``mongodb+srv``, ``redis``, ``amqp``, ``ftp``, ``sftp``, ``smtp``,
  ``http(s)`` userinfo, ``jdbc:mysql://`` ...) and Oracle's ``jdbc:oracle:thin:user/password@``.
  Only the password is masked: the host stays readable (an e-mail-like ``password@host.tld`` is
  not taken for an address). ``password=`` in a URL's query is the assignment detector's.
- Passwords in prose: "my password is hunter2", "the wifi passphrase is correct-horse-battery",
  "secret is 's3cr3t'", "PIN: 4821", "Passwort: ..." and the like (a key word, then "is", "was",
  "will be", ":", "="). The value must be quoted, or hold a digit or a symbol, or be words
  joined by hyphens: "the password is wrong" or "the secret is out" are not secrets.

Each pattern starts with a literal ("://", a key word, ":AA", "-us", "hooks."), found with
``str.find`` or a literal-led regex, so none of them scans the text with a character class.
"""

from __future__ import annotations

import re

from contextkit.compressors._pii_detect import _R_ASSIGN, _R_KEY, Candidate, _Scan
from contextkit.compressors._pii_secrets import _PLACEHOLDER_VALUE

_SCHEME = re.compile(r"(?i:[a-z][a-z0-9+.\-]{1,30})\Z")
_USERINFO = re.compile(r"([^\s:/@<>\"'`]{0,128}):([^\s/<>\"'`]{1,256})@(?=[\w\[])")  # the last "@" before the host
_ORACLE = re.compile(r"jdbc:oracle:[a-z]+:(?:@)?[^\s/@:<>\"']{1,64}/([^\s@<>\"']{1,128})@", re.IGNORECASE)
_PROSE = re.compile(
    r"(?i:\b(?:pass(?:word|phrase|code)|passwd|pwd|pin|secret|kennwort|passwort|mot de passe|contraseña|senha|"
    r"пароль|wachtwoord|lösenord|hasło|salasana)\b)"
    r"(?:[ \t]+(?:for|of|to|on)(?:[ \t]+[\w.\-]{1,32}){1,3}?)?"
    r"[ \t]*(?:(?i:is|was|will[ \t]+be|is[ \t]+now|is[ \t]+set[ \t]+to|would[ \t]+be|ist|est|es|é|это)"
    r"(?:[ \t]*:|(?=[ \t\"'“‘«]))"  # the verb ends at a space, a colon or a quote ("password is/path" is no label)
    r"|(?P<colon>:)|(?=[ \t]+[\"“‘«]))[ \t]*"
    r"(?:[\"'“‘«](?P<quoted>[^\"'“”‘’«»\n<>]{3,128})[\"'”’»]|(?P<bare>[^\s\"'“”‘’<>]{4,128}))"
)
_PROSE_STEMS = ("passw", "passp", "passc", "pwd", "pin", "secret", "kennwort", "passwort", "mot de passe", "contraseña", "senha",
                "пароль", "wachtwoord", "lösenord", "hasło", "salasana")
_TRAILING = ".,:;)]}"  # "!" and "?" are kept: passwords use them
_SYMBOLS = frozenset("!@#$%^&*+=?~_/\\|")
_HYPHEN_WORDS = re.compile(r"[^\W\d_]{2,}(?:[-_.][^\W\d_]{2,}){2,}")
_TELEGRAM = re.compile(r"\d{8,10}:AA[0-9A-Za-z_\-]{33}(?![0-9A-Za-z_\-])")
_MAILCHIMP = re.compile(r"[0-9a-f]{32}-us\d{1,2}(?!\w)")
_WEBHOOK = re.compile(r"hooks\.slack\.com/(?:services|workflows)/([A-Za-z0-9/_\-]{20,})|"
                      r"discord(?:app)?\.com/api/webhooks/(\d{6,}/[A-Za-z0-9_\-]{40,})")


def _find_credentials(scan: _Scan) -> list[Candidate]:
    text = scan.text
    out: list[Candidate] = []
    if "://" in text or "jdbc:" in text.lower():
        out += _url_passwords(text)
    lower = text.lower()
    if any(stem in lower for stem in _PROSE_STEMS):
        out += _prose_passwords(text, lower)
    if ":AA" in text:
        out += [(m.start(), m.end(), "SECRET", "telegram_bot_token", _R_KEY) for m in _around(text, ":AA", 10, _TELEGRAM)]
    if "-us" in text:
        out += [(m.start(), m.end(), "SECRET", "mailchimp_key", _R_KEY) for m in _around(text, "-us", 32, _MAILCHIMP)]
    if "hooks." in text or "/api/webhooks/" in text:
        for m in _WEBHOOK.finditer(text):
            g = 1 if m.group(1) else 2
            out.append((m.start(g), m.end(g), "SECRET", "webhook_url", _R_KEY))
    return out


def _around(text: str, literal: str, back: int, pattern: re.Pattern[str]) -> list[re.Match[str]]:
    """Matches of ``pattern`` that start up to ``back`` characters before each ``literal``."""
    found: list[re.Match[str]] = []
    i = text.find(literal)
    while i >= 0:
        for j in range(max(0, i - back), i):
            m = pattern.match(text, j)
            if m is not None and (j == 0 or not text[j - 1].isalnum()):
                found.append(m)
                break
        i = text.find(literal, i + 1)
    return found


def _url_passwords(text: str) -> list[Candidate]:
    out: list[Candidate] = []
    i = text.find("://")
    while i >= 0:
        if _SCHEME.search(text, max(0, i - 32), i):
            m = _USERINFO.match(text, i + 3)
            if m is not None and _is_value(m.group(2)):
                out.append((m.start(2), m.end(2), "SECRET", "url_password", _R_KEY))
        i = text.find("://", i + 3)
    if "jdbc:oracle:" in text.lower():
        out += [(m.start(1), m.end(1), "SECRET", "url_password", _R_KEY) for m in _ORACLE.finditer(text)
                if _is_value(m.group(1))]
    return out


def _is_value(value: str) -> bool:
    """Not a stand-in ("<password>", "${PASS}", "****")."""
    return bool(value) and not _PLACEHOLDER_VALUE.fullmatch(value) and len(set(value)) > 1


def _prose_passwords(text: str, lower: str) -> list[Candidate]:
    out: list[Candidate] = []
    seen: set[int] = set()
    for stem in _PROSE_STEMS:
        i = lower.find(stem)
        while i >= 0:
            if i not in seen and (i == 0 or not text[i - 1].isalnum()):
                seen.add(i)
                m = _PROSE.match(text, i)
                if m is not None:
                    hit = _prose_value(m)
                    if hit:
                        out.append(hit)
            i = lower.find(stem, i + 1)
    return out


def _prose_value(m: re.Match[str]) -> Candidate | None:
    if m.group("quoted") is not None:
        value, s = m.group("quoted"), m.start("quoted")
        if value.strip() and _is_value(value.strip()):
            return (s, m.end("quoted"), "SECRET", "prose_password", _R_ASSIGN)
        return None
    value, s = m.group("bare"), m.start("bare")
    opened = m.string[max(0, m.start() - 80):m.start()]
    while value and value[-1] in _TRAILING:
        closing = value[-1]
        if closing in ")]}":  # the prose's bracket ("(password: abc1)"), or the password's own last character
            opening = {")": "(", "]": "[", "}": "{"}[closing]
            if value.count(closing) <= value.count(opening) or opened.count(opening) <= opened.count(closing):
                break
        value = value[:-1]
    if len(value) < 4 or not _is_value(value):
        return None
    if _HYPHEN_WORDS.fullmatch(value):
        return (s, s + len(value), "SECRET", "prose_password", _R_ASSIGN)  # correct-horse-battery: a passphrase
    if not any(ch.isdigit() for ch in value) and (m.group("colon") or len(value) < 8
                                                  or not any(ch in _SYMBOLS for ch in value)):
        return None  # "the password is wrong", "self-evident", "pass: the!": words, not a password
    return (s, s + len(value), "SECRET", "prose_password", _R_ASSIGN)
