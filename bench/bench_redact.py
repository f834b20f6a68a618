"""PII redaction: recall and precision on planted values, false positives in real text, speed.

What it measures, for ``contextkit.compressors.redact.PIIRedactor`` with its defaults:

1. A labelled set, generated with a seeded RNG (``--seed``, default 13). The carrier
   text is real: all of ``shared/data/tinyshakespeare/input.txt`` (speeches joined into
   documents of about 1.5 KB) and the first ``--scifact-docs`` abstracts (title + text)
   of ``shared/data/beir_scifact/corpus.jsonl``. Into randomly chosen documents, at
   random spaces between words, the generator plants values built with the right
   structure and several real-world spellings each (``generate_*`` below):

   - EMAIL: name-like local parts (dots, plus tags, digits, hyphens, upper case) at
     a mix of domains (sub-domains, country and generic TLDs);
   - PHONE: US/NANP ``(555) 123-4567``, ``555-123-4567``, ``555.123.4567``, ``+1 ...``,
     ``1-800-...``; UK, FR, DE, NL, IT, ES, IN, AU, BR, JP in international form
     (spaces, dashes, ``(0)``, unseparated E.164) and UK/FR/DE/NL/IT national forms;
   - CARD: Visa (13/16/19), Mastercard (51-55, 2221-2720), Amex, Discover, Diners,
     JCB, UnionPay, Maestro, Mir: a real IIN prefix, random digits, the Luhn check
     digit computed; grouped by spaces or dashes as printed, or unseparated;
   - IBAN: 16 countries with their BBAN layout, check digits computed with mod-97,
     compact or in groups of four;
   - IP: IPv4 (private and public ranges) and IPv6 (full, compressed, link-local,
     IPv4-mapped);
   - SECRET, key formats: AWS access key ids, GitHub ``ghp_``/``gho_``/``github_pat_``,
     Slack ``xox[abp]-``, Stripe ``sk_live_``/``pk_live_``/``sk_test_``/``rk_live_``,
     OpenAI ``sk-``/``sk-proj-``, Google ``AIza``, JWTs (base64url JSON header and
     payload, random signature), RSA/EC/OpenSSH private-key PEM blocks, ``Bearer``
     headers, and ``password=`` / ``"api_key": "..."`` / ``DB_PASSWORD=`` /
     ``secret: '...'`` assignments (the value is the planted span);
   - SECRET, generic: random tokens from ``secrets.token_urlsafe``, standard base64 of
     random bytes and random base62, 20 to 64 characters, unlabelled;
   - for information only, unlabelled random hex tokens (32/40/64 hex digits), which
     the redactor skips by design (hex is how digests and SHAs look; see its docstring).

   Values sit bare between words, in parentheses or angle brackets, before a comma or
   full stop, or after a natural label ("Tel.", "IBAN:", "card no."). Hard negatives
   are planted the same way and must not be redacted: Luhn-failing 13-19 digit numbers
   with real IIN prefixes and card grouping, IBANs with wrong check digits, version
   strings (``v2.10.3``, ``1.2.3.4.5``, ``version 3.11.4.1``), dates and times, ISBNs,
   invalid dotted quads (``256.1.2.3``), plain numbers, UUIDs, git SHAs, the bare
   words "password" / "secret" / "token", key prefixes inside words and long words.

2. Span-level scores, per kind and per format. A planted value is *found* when one
   reported span covers it whole (*found, right kind* when that span also has the
   planted kind). A reported span over no planted value is a false positive: on a hard
   negative, or in the carrier text itself. Precision per kind = spans of that kind
   over a planted value of any kind / all spans of that kind. Redactions in the carrier
   text are listed, with those that touch an ordinary word (an alphabetic run) counted
   apart: the goal is zero.

3. Speed: MB/s (UTF-8 bytes / wall seconds, best of ``--repeats``) of ``redact_many``
   with a fresh redactor over the carrier documents alone and over the documents with
   the planted values, and the seconds to redact a single 1,000,000-character text of
   Shakespeare and of SciFact.

Goals (from the issue): recall >= 0.99 for e-mails, cards and keys, no redaction inside
ordinary words of the carrier text; 1 MB of English well under a second.

4. Locales and clean text (``bench/_redact_locales.py``; needs ``faker``): Faker-generated phone
   numbers of 25 locales (a share with extensions), e-mails, cards of every brand Faker knows and
   Maestro of every length 12-19, credentials in connection URLs of 22 schemes and in prose;
   recall per locale and per kind. Then a clean corpus (barcodes, ISBNs, order numbers,
   versions, dates, prices, statistics, code, PEP paragraphs, Tiny Shakespeare lines) and the
   records redacted per 10,000 of each family. ``--per-locale 0`` skips this part.

5. Identifiers (``bench/_redact_ids.py``): generated national identifiers of every kind the ID
   detector knows, valid and with a broken check, and dates of birth, in sentences with and without
   a label; recall on valid values, false positives on invalid ones, the old kinds' recall beside.
   ``--ids-per-kind 0`` skips it.

6. Held out (``bench/_redact_presidio.py``): presidio-research's labelled sentences (``--presidio``,
   default ``../extdata/presidio/synth_dataset_v2.json`` beside the repository; missing: exit 2 with
   how to get it; ``--no-presidio`` skips), the share of labelled spans fully masked per entity, on the
   held-out second half and the first half; and the clean corpora (SciFact, PEPs, Tiny Shakespeare):
   ID/DOB spans and spans the old redactor did not report. The old redactor is the one at
   ``--baseline-rev`` (default 54fde72), run from ``git archive`` in a subprocess in the same run.

Run: ``python bench/bench_redact.py`` (a few minutes on a busy 2-core machine);
``--json out.json`` keeps the numbers, ``--show N`` prints N examples of each miss.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import re
import string
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextkit.compressors.redact import PIIRedactor

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PRESIDIO = REPO.parent / "extdata" / "presidio" / "synth_dataset_v2.json"
SHAKESPEARE = DATA / "tinyshakespeare" / "input.txt"
SCIFACT = DATA / "beir_scifact" / "corpus.jsonl"

ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"


@dataclass(frozen=True)
class Plant:
    start: int
    end: int
    kind: str  # EMAIL ... SECRET, or NEG for a hard negative
    fmt: str  # format / generator name, e.g. "card/amex_grouped"


# ----------------------------------------------------------------- carrier
def load_carrier(scifact_docs: int) -> list[tuple[str, str]]:
    """(source, text) documents: Shakespeare speeches joined to ~1.5 KB, then SciFact abstracts."""
    if not SHAKESPEARE.is_file() or not SCIFACT.is_file():
        raise SystemExit(f"carrier data not found under {DATA}")
    docs: list[tuple[str, str]] = []
    buf: list[str] = []
    for speech in SHAKESPEARE.read_text(encoding="utf-8").split("\n\n"):
        buf.append(speech)
        if sum(map(len, buf)) >= 1500:
            docs.append(("shakespeare", "\n\n".join(buf)))
            buf = []
    if buf:
        docs.append(("shakespeare", "\n\n".join(buf)))
    with SCIFACT.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= scifact_docs:
                break
            rec = json.loads(line)
            docs.append(("scifact", f"{rec['title']} {rec['text']}".strip()))
    return docs


# ----------------------------------------------------------------- generators
FIRST = ["anna", "ben", "carlos", "dana", "emeka", "fatima", "giulia", "hiro", "ines", "jakub", "kofi", "lena",
         "maria", "nils", "olga", "pierre", "qing", "rahul", "sofia", "tomas", "ursula", "viktor", "wei", "yusuf"]
LAST = ["smith", "mueller", "garcia", "rossi", "nguyen", "kowalski", "okafor", "tanaka", "dubois", "jensen",
        "oconnor", "schneider", "silva", "haddad", "novak", "patel", "kim", "larsen", "moreau", "fischer"]
DOMAINS = ["example.com", "mail.example.org", "gmail.com", "outlook.com", "uni-heidelberg.de", "cs.ox.ac.uk",
           "company.co.uk", "startup.io", "research.institute.edu", "post.example.fr", "web.de", "yahoo.co.jp",
           "proton.me", "hospital-network.org", "dept.gov.au", "example.museum"]


def luhn_complete(body: str) -> str:
    """``body`` plus the check digit that makes it pass Luhn."""
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return body + str((10 - total % 10) % 10)


def luhn_ok(number: str) -> bool:
    return luhn_complete(number[:-1]) == number


def iban_check(country: str, bban: str) -> str:
    rearranged = bban + country + "00"
    value = int("".join(str(int(ch, 36)) for ch in rearranged))
    return f"{98 - value % 97:02d}"


class Generator:
    """Realistic PII values; every method returns (value, format name)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def digits(self, n: int) -> str:
        return "".join(self.rng.choice(string.digits) for _ in range(n))

    def chars(self, alphabet: str, n: int) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    # -------------------------------------------------------- EMAIL
    def email(self) -> tuple[str, str]:
        r = self.rng
        f, last = r.choice(FIRST), r.choice(LAST)
        style = r.randrange(7)
        local = [f"{f}.{last}", f"{f[0]}{last}", f"{f}_{last}{r.randint(1, 99)}", f"{f}+{r.choice(['news', 'work', 'x'])}",
                 f"{last}-{f}", f"{f}{r.randint(1970, 2005)}", f"{f[0].upper()}.{last.capitalize()}"][style]
        domain = r.choice(DOMAINS)
        return f"{local}@{domain}", f"email/style{style}"

    # -------------------------------------------------------- PHONE
    def phone(self) -> tuple[str, str]:
        r = self.rng
        d = self.digits
        area, exch = f"{r.randint(2, 9)}{d(2)}", f"{r.randint(2, 9)}{d(2)}"
        options = [
            ("us_paren", f"({area}) {exch}-{d(4)}"),
            ("us_dash", f"{area}-{exch}-{d(4)}"),
            ("us_dot", f"{area}.{exch}.{d(4)}"),
            ("us_intl", f"+1 {area} {exch} {d(4)}"),
            ("us_intl_dash", f"+1-{area}-{exch}-{d(4)}"),
            ("us_tollfree", f"1-800-{exch}-{d(4)}"),
            ("us_intl_paren", f"+1 ({area}) {exch}-{d(4)}"),
            ("uk_intl_london", f"+44 20 {r.randint(3, 8)}{d(3)} {d(4)}"),
            ("uk_intl_mobile", f"+44 7{d(3)} {d(6)}"),
            ("uk_intl_trunk", f"+44 (0)20 {r.randint(3, 8)}{d(3)} {d(4)}"),
            ("uk_national", f"020 {r.randint(3, 8)}{d(3)} {d(4)}"),
            ("uk_mobile", f"07{d(3)} {d(6)}"),
            ("fr_intl", f"+33 {r.randint(1, 7)} {d(2)} {d(2)} {d(2)} {d(2)}"),
            ("fr_national", f"0{r.randint(1, 7)} {d(2)} {d(2)} {d(2)} {d(2)}"),
            ("fr_dots", f"0{r.randint(1, 7)}.{d(2)}.{d(2)}.{d(2)}.{d(2)}"),
            ("de_intl", f"+49 30 {d(8)}"),
            ("de_intl_trunk", f"+49 (0)30 {d(4)} {d(4)}"),
            ("de_national", f"030 {d(8)}"),
            ("de_mobile", f"0171 {d(7)}"),
            ("nl_intl", f"+31 20 {d(3)} {d(4)}"),
            ("nl_national", f"020-{d(7)}"),
            ("it_intl", f"+39 02 {d(4)} {d(4)}"),
            ("es_intl", f"+34 9{d(2)} {d(3)} {d(3)}"),
            ("in_intl", f"+91 9{d(4)} {d(5)}"),
            ("au_intl", f"+61 4{d(2)} {d(3)} {d(3)}"),
            ("br_intl", f"+55 11 9{d(4)}-{d(4)}"),
            ("jp_intl", f"+81 3-{d(4)}-{d(4)}"),
            ("e164", f"+{r.choice(['44', '49', '33', '1', '61'])}{d(10)}"),
        ]
        name, value = r.choice(options)
        return value, f"phone/{name}"

    # -------------------------------------------------------- CARD
    CARD_BRANDS = [  # name, prefixes, lengths, grouping for 16 / other
        ("visa", ["4"], [16, 16, 16, 13, 19]),
        ("mastercard", ["51", "52", "53", "54", "55", "2221", "2500", "2720"], [16]),
        ("amex", ["34", "37"], [15]),
        ("discover", ["6011", "65", "644", "649"], [16]),
        ("diners", ["36", "38", "300", "305"], [14]),
        ("jcb", ["3528", "3550", "3589"], [16]),
        ("unionpay", ["62"], [16, 19]),
        ("maestro", ["6759", "5018", "6304"], [16, 19]),
        ("mir", ["2200", "2204"], [16]),
    ]

    def card_number(self, valid: bool = True) -> tuple[str, str]:
        r = self.rng
        brand, prefixes, lengths = r.choice(self.CARD_BRANDS)
        prefix, n = r.choice(prefixes), r.choice(lengths)
        number = luhn_complete(prefix + self.digits(n - len(prefix) - 1))
        if not valid:
            last = int(number[-1])
            number = number[:-1] + str((last + r.randint(1, 9)) % 10)
        assert luhn_ok(number) == valid
        return number, brand

    def group_card(self, number: str, brand: str) -> tuple[str, str]:
        r = self.rng
        style = r.choice(["space", "space", "dash", "none"])
        if style == "none":
            return number, "none"
        sep = " " if style == "space" else "-"
        if brand == "amex":
            sizes = [4, 6, 5]
        elif brand == "diners" and len(number) == 14:
            sizes = [4, 6, 4]
        else:
            sizes = [4] * (len(number) // 4) + ([len(number) % 4] if len(number) % 4 else [])
        out, i = [], 0
        for s in sizes:
            out.append(number[i:i + s])
            i += s
        return sep.join(out), style

    def card(self) -> tuple[str, str]:
        number, brand = self.card_number()
        value, style = self.group_card(number, brand)
        return value, f"card/{brand}_{len(number)}_{style}"

    # -------------------------------------------------------- IBAN
    IBAN_LAYOUT = {  # country: BBAN pattern (n = digit, a = capital, c = capital or digit)
        "DE": "n" * 18, "GB": "aaaa" + "n" * 14, "FR": "n" * 10 + "c" * 11 + "nn", "ES": "n" * 20,
        "IT": "a" + "n" * 10 + "c" * 12, "NL": "aaaa" + "n" * 10, "BE": "n" * 12, "CH": "n" * 5 + "c" * 12,
        "PL": "n" * 24, "AT": "n" * 16, "SE": "n" * 20, "NO": "n" * 11, "IE": "aaaa" + "n" * 14,
        "PT": "n" * 21, "DK": "n" * 14, "FI": "n" * 14,
    }

    def iban_compact(self, valid: bool = True) -> tuple[str, str]:
        r = self.rng
        country = r.choice(sorted(self.IBAN_LAYOUT))
        bban = "".join(r.choice(string.digits) if p == "n" else r.choice(string.ascii_uppercase) if p == "a"
                       else r.choice(string.ascii_uppercase + string.digits) for p in self.IBAN_LAYOUT[country])
        check = iban_check(country, bban)
        if not valid:
            check = f"{(int(check) + r.randint(1, 96)) % 97:02d}"
        iban = country + check + bban
        assert (int("".join(str(int(ch, 36)) for ch in iban[4:] + iban[:4])) % 97 == 1) == valid
        return iban, country

    def iban(self, valid: bool = True) -> tuple[str, str]:
        compact, country = self.iban_compact(valid)
        if self.rng.random() < 0.5:
            return compact, f"iban/{country}_compact"
        return " ".join(compact[i:i + 4] for i in range(0, len(compact), 4)), f"iban/{country}_grouped"

    # -------------------------------------------------------- IP
    def ip(self) -> tuple[str, str]:
        r = self.rng
        style = r.randrange(6)
        if style == 0:
            return f"10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}", "ip/v4_private10"
        if style == 1:
            return f"192.168.{r.randint(0, 255)}.{r.randint(1, 254)}", "ip/v4_private192"
        if style == 2:
            return ".".join(str(r.randint(1, 223)) for _ in range(4)), "ip/v4_public"
        groups = [f"{r.randint(0, 0xFFFF):x}" for _ in range(8)]
        if style == 3:
            return ":".join(groups), "ip/v6_full"
        if style == 4:
            return f"2001:db8:{groups[2]}::{groups[6]}:{groups[7]}", "ip/v6_compressed"
        return f"fe80::{groups[4]}:{groups[5]}:{groups[6]}:{groups[7]}", "ip/v6_linklocal"

    # -------------------------------------------------------- SECRET: key formats
    def jwt(self) -> str:
        r = self.rng

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        header = {"alg": r.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}
        payload = {"sub": self.digits(10), "name": f"{r.choice(FIRST).title()} {r.choice(LAST).title()}",
                   "iat": r.randint(1_500_000_000, 1_800_000_000)}
        sig = bytes(r.getrandbits(8) for _ in range(32))
        return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}.{b64(sig)}"

    def pem(self) -> tuple[str, str]:
        r = self.rng
        label = r.choice(["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY"])
        body = base64.b64encode(bytes(r.getrandbits(8) for _ in range(r.choice([120, 300, 600])))).decode()
        lines = "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
        return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----", f"secret/pem_{label.split()[0].lower()}"

    def key(self) -> tuple[str, str]:
        r = self.rng
        c = self.chars
        options = [
            ("aws_access_key_id", lambda: r.choice(["AKIA", "ASIA"]) + c(string.ascii_uppercase + string.digits, 16)),
            ("github_ghp", lambda: "ghp_" + c(ALNUM, 36)),
            ("github_gho", lambda: "gho_" + c(ALNUM, 36)),
            ("github_pat", lambda: "github_pat_" + c(ALNUM, 22) + "_" + c(ALNUM, 59)),
            ("slack", lambda: f"xox{r.choice('abp')}-{self.digits(12)}-{self.digits(13)}-{c(ALNUM, 24)}"),
            ("stripe_sk_live", lambda: "sk_live_" + c(ALNUM, r.choice([24, 99]))),
            ("stripe_pk_live", lambda: "pk_live_" + c(ALNUM, 24)),
            ("stripe_sk_test", lambda: "sk_test_" + c(ALNUM, 24)),
            ("stripe_rk_live", lambda: "rk_live_" + c(ALNUM, 24)),
            ("openai_sk", lambda: "sk-" + c(ALNUM, 48)),
            ("openai_proj", lambda: "sk-proj-" + c(B64URL, 64)),
            ("google_api_key", lambda: "AIza" + c(ALNUM + "-_", 35)),
            ("jwt", self.jwt),
        ]
        name, make = r.choice(options)
        return make(), f"secret/{name}"

    def password(self) -> str:
        r = self.rng
        style = r.randrange(3)
        if style == 0:  # random printable password
            return self.chars(ALNUM + "!#%&*@^~", r.randint(10, 20))
        if style == 1:  # word + digits + symbol
            return f"{r.choice(FIRST).capitalize()}{r.randint(10, 9999)}{r.choice('!#$%&*')}"
        return self.chars(ALNUM, r.randint(16, 40))

    def assignment(self) -> tuple[str, str, str, str]:
        """(prefix, value, suffix, format): the value is the planted secret."""
        r = self.rng
        value = self.password()
        options = [
            ("password_eq", "password=", ""),
            ("env_db_password", "DB_PASSWORD=", ""),
            ("json_api_key", '"api_key": "', '"'),
            ("yaml_secret", "secret: '", "'"),
            ("kwarg_password", "password='", "'"),
            ("env_aws_secret", "AWS_SECRET_ACCESS_KEY=", ""),
            ("client_secret", "client_secret = \"", "\""),
            ("url_token", "https://api.example.com/v1/items?limit=20&access_token=", ""),
            ("bearer", "Authorization: Bearer ", ""),
        ]
        name, prefix, suffix = r.choice(options)
        if name in ("env_aws_secret", "bearer", "url_token"):
            value = self.chars(ALNUM + "/+", 40) if name == "env_aws_secret" else self.chars(B64URL, 32)
            value = value if sum(ch.isdigit() for ch in value) else value[:-1] + "7"
        return prefix, value, suffix, f"secret/assign_{name}"

    def generic(self) -> tuple[str, str]:
        r = self.rng
        n = r.randint(20, 64)
        style = r.randrange(3)
        if style == 0:
            return base64.urlsafe_b64encode(bytes(r.getrandbits(8) for _ in range(n))).decode().rstrip("=")[:n], \
                "generic/token_urlsafe"
        if style == 1:
            raw = base64.b64encode(bytes(r.getrandbits(8) for _ in range(n))).decode()
            return raw[:n], "generic/base64"
        return self.chars(ALNUM, n), "generic/base62"

    def hex_token(self) -> tuple[str, str]:
        n = self.rng.choice([32, 40, 64])
        return self.chars("0123456789abcdef", n), f"hex/{n}"

    # -------------------------------------------------------- hard negatives
    def negative(self) -> tuple[str, str]:
        r = self.rng
        d = self.digits
        kind = r.randrange(16)
        if kind == 0:
            number, brand = self.card_number(valid=False)
            value, style = self.group_card(number, brand)
            return value, "neg/card_bad_luhn"
        if kind == 1:
            value, fmt = self.iban(valid=False)
            return value, "neg/iban_bad_check"
        if kind == 2:
            return f"v{r.randint(0, 9)}.{r.randint(0, 30)}.{r.randint(0, 30)}", "neg/version_v"
        if kind == 3:
            return ".".join(str(r.randint(0, 20)) for _ in range(5)), "neg/version_5part"
        if kind == 4:
            return f"version {r.randint(1, 9)}.{r.randint(0, 20)}.{r.randint(0, 20)}.{r.randint(0, 99)}", \
                "neg/version_4part_labelled"
        if kind == 5:
            y, m, dd = r.randint(1900, 2030), r.randint(1, 12), r.randint(1, 28)
            return r.choice([f"{y}-{m:02d}-{dd:02d}", f"{dd:02d}/{m:02d}/{y}", f"{dd:02d}.{m:02d}.{y}",
                             f"{y}-{m:02d}-{dd:02d} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:00"]), "neg/date"
        if kind == 6:
            return f"ISBN {r.choice(['978', '979'])}-{r.randint(0, 9)}-{d(2)}-{d(6)}-{r.randint(0, 9)}", "neg/isbn"
        if kind == 7:
            return r.choice([f"{r.randint(256, 999)}.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(0, 255)}",
                             f"10.0.{r.randint(0, 255)}.{r.randint(256, 999)}"]), "neg/bad_ipv4"
        if kind == 8:
            return r.choice([f"{r.randint(1000, 9999)}", f"{r.randint(1, 999)},{d(3)},{d(3)}",
                             f"{r.randint(1, 99)}.{d(3)}", f"n = {r.randint(10, 99999)}",
                             f"p < 0.0{r.randint(1, 5)}", f"{d(r.randint(13, 22))}"]), "neg/number"
        if kind == 9:
            h = self.chars("0123456789abcdef", 32)
            return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}", "neg/uuid"
        if kind == 10:
            return f"commit {self.chars('0123456789abcdef', 40)}", "neg/git_sha"
        if kind == 11:
            return r.choice(["the password", "a secret", "token", "the api key", "Password reset",
                             "secret: the garden", "password: forgotten again"]), "neg/keyword_alone"
        if kind == 12:
            return r.choice(["TAKIAN", "SKATEBOARD", "ghpost", "skyline", "eyJoy", "AIzaleas"]), "neg/prefix_in_word"
        if kind == 13:
            return r.choice(["internationalization", "counterrevolutionaries", "electroencephalography",
                             "deinstitutionalization", "incomprehensibilities", "uncharacteristically"]), \
                "neg/long_word"
        if kind == 14:
            return f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}", "neg/time"
        return r.choice(["getElementsByClassName", "PyObject_GetAttrString", "AbstractSingletonProxyFactoryBean",
                         "x86_64-unknown-linux-gnu", "https://example.org/docs/getting-started/installation"]), \
            "neg/identifier"


WRAPS = [("", ""), ("", ""), ("", ","), ("", "."), ("(", ")"), ("<", ">"), ('"', '"')]
LABELS = {"EMAIL": ["e-mail:", "Contact", "mailto:"], "PHONE": ["Tel.", "phone:", "call"],
          "CARD": ["card no.", "Card:", "paid with"], "IBAN": ["IBAN:", "IBAN", "account"],
          "IP": ["from", "host", "IP"], "SECRET": ["key:", "token", "use"]}


def plant(docs: list[tuple[str, str]], n_items: dict[str, int], n_negative: int,
          rng: random.Random) -> tuple[list[str], list[list[Plant]]]:
    """Insert generated values at random spaces of random documents; return texts and their plants."""
    gen = Generator(rng)
    items: list[tuple[str, str, str, str, str]] = []  # kind, prefix, value, suffix, fmt
    makers = {"EMAIL": gen.email, "PHONE": gen.phone, "CARD": gen.card, "IBAN": gen.iban, "IP": gen.ip,
              "KEY": gen.key, "PEM": gen.pem, "GENERIC": gen.generic, "HEX": gen.hex_token}
    for kind, count in n_items.items():
        for _ in range(count):
            if kind == "ASSIGN":
                prefix, value, suffix, fmt = gen.assignment()
                items.append(("SECRET", prefix, value, suffix, fmt))
                continue
            value, fmt = makers[kind]()
            real_kind = {"KEY": "SECRET", "PEM": "SECRET", "GENERIC": "SECRET", "HEX": "HEX"}.get(kind, kind)
            if kind == "PEM":
                items.append((real_kind, "\n", value, "\n", fmt))
                continue
            left, right = rng.choice(WRAPS)
            if rng.random() < 0.3 and real_kind in LABELS:
                left = rng.choice(LABELS[real_kind]) + " " + left
            items.append((real_kind, left, value, right, fmt))
    for _ in range(n_negative):
        value, fmt = gen.negative()
        left, right = rng.choice(WRAPS[:4])
        items.append(("NEG", left, value, right, fmt))
    per_doc: dict[int, list[tuple[str, str, str, str, str]]] = defaultdict(list)
    for item in items:
        per_doc[rng.randrange(len(docs))].append(item)
    texts: list[str] = []
    plants: list[list[Plant]] = []
    for i, (_, text) in enumerate(docs):
        mine = per_doc.get(i, [])
        if not mine:
            texts.append(text)
            plants.append([])
            continue
        spaces = [m.start() for m in re.finditer(r"(?<=[^\s]) (?=[^\s])", text)] or [len(text)]
        where = sorted(rng.sample(spaces, min(len(mine), len(spaces))))
        while len(where) < len(mine):
            where.append(where[-1])
        out, doc_plants, last = [], [], 0
        pos = 0
        for at, (kind, prefix, value, suffix, fmt) in zip(where, mine):
            out.append(text[last:at] + " " + prefix)
            pos += at - last + 1 + len(prefix)
            doc_plants.append(Plant(pos, pos + len(value), kind, fmt))
            out.append(value + suffix)
            pos += len(value) + len(suffix)
            last = at
        out.append(text[last:])
        new = "".join(out)
        assert all(new[p.start:p.end] for p in doc_plants)
        texts.append(new)
        plants.append(doc_plants)
    return texts, plants


# ----------------------------------------------------------------- scoring
WORDISH = re.compile(r"[^\W\d_]+(?:['\-][^\W\d_]+)*")


def carrier_span(text: str, s: Any) -> dict[str, Any]:
    """A redaction in carrier text, and whether it is inside ordinary words: the span is itself a
    word or hyphenated compound, or one of its ends cuts a word (a letter on both sides)."""
    value = text[s.start:s.end]
    cuts = ((s.start > 0 and text[s.start - 1].isalpha() and value[:1].isalpha())
            or (s.end < len(text) and text[s.end].isalpha() and value[-1:].isalpha()))
    return {"kind": s.kind, "detector": s.detector, "text": value,
            "context": text[max(0, s.start - 30):s.end + 30],
            "in_words": bool(cuts or WORDISH.fullmatch(value))}
def score(texts: list[str], plants: list[list[Plant]], results: list[Any]) -> dict[str, Any]:
    found: Counter[str] = Counter()
    found_kind: Counter[str] = Counter()
    total: Counter[str] = Counter()
    fmt_total: Counter[str] = Counter()
    fmt_found: Counter[str] = Counter()
    misses: dict[str, list[str]] = defaultdict(list)
    span_total: Counter[str] = Counter()
    span_tp: Counter[str] = Counter()
    neg_fp: Counter[str] = Counter()
    neg_examples: dict[str, list[str]] = defaultdict(list)
    carrier_fp: list[dict[str, Any]] = []
    for text, doc_plants, res in zip(texts, plants, results):
        spans = res.spans
        for p in doc_plants:
            covering = [s for s in spans if s.start <= p.start and s.end >= p.end]
            if p.kind == "NEG":
                hit = [s for s in spans if s.start < p.end and s.end > p.start]
                total["NEG"] += 1
                fmt_total[p.fmt] += 1
                if hit:
                    neg_fp[p.fmt] += 1
                    neg_examples[p.fmt].append(text[p.start:p.end])
                continue
            total[p.kind] += 1
            fmt_total[p.fmt] += 1
            if covering:
                found[p.kind] += 1
                fmt_found[p.fmt] += 1
                if any(s.kind == p.kind for s in covering):
                    found_kind[p.kind] += 1
            else:
                misses[p.fmt].append(text[max(0, p.start - 20):p.end + 20])
        for s in spans:
            span_total[s.kind] += 1
            over = [p for p in doc_plants if s.start < p.end and s.end > p.start]
            if any(p.kind != "NEG" for p in over):
                span_tp[s.kind] += 1
            elif not over:
                carrier_fp.append(carrier_span(text, s))
    kinds = ["EMAIL", "PHONE", "CARD", "IBAN", "IP", "SECRET"]
    per_kind = {}
    for k in kinds:
        per_kind[k] = {
            "planted": total[k], "found": found[k], "recall": found[k] / total[k] if total[k] else None,
            "found_right_kind": found_kind[k],
            "spans": span_total[k], "spans_on_pii": span_tp[k],
            "precision": span_tp[k] / span_total[k] if span_total[k] else None,
        }
    return {
        "per_kind": per_kind,
        "hex_unlabelled": {"planted": total["HEX"], "found": found["HEX"]},
        "per_format": {f: {"planted": fmt_total[f], "found": fmt_found[f]} for f in sorted(fmt_total)
                       if not f.startswith("neg/")},
        "negatives": {"planted": total["NEG"], "redacted": sum(neg_fp.values()),
                      "by_format": {f: {"planted": fmt_total[f], "redacted": neg_fp[f]}
                                    for f in sorted(fmt_total) if f.startswith("neg/")},
                      "examples": {f: v[:5] for f, v in neg_examples.items()}},
        "carrier_fp": carrier_fp,
        "misses": {f: v for f, v in misses.items()},
    }


# ----------------------------------------------------------------- speed
def best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def speed(carrier: list[str], planted: list[str], repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, texts in (("carrier", carrier), ("with_pii", planted)):
        size = sum(len(t.encode("utf-8")) for t in texts)
        sec = best_of(lambda texts=texts: PIIRedactor().redact_many(texts), repeats)
        out[name] = {"mb": size / 1e6, "seconds": sec, "mb_per_s": size / 1e6 / sec}
    shakespeare = SHAKESPEARE.read_text(encoding="utf-8")[:1_000_000]
    sci: list[str] = []
    with SCIFACT.open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            sci.append(f"{rec['title']} {rec['text']}")
            if sum(map(len, sci)) > 1_000_000:
                break
    scifact = "\n\n".join(sci)[:1_000_000]
    for name, text in (("one_mb_shakespeare", shakespeare), ("one_mb_scifact", scifact)):
        out[name] = {"chars": len(text), "seconds": best_of(lambda text=text: PIIRedactor().redact(text), repeats)}
    return out


# ----------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--scifact-docs", type=int, default=2000, help="SciFact abstracts in the carrier")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the number of planted values")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--show", type=int, default=3, help="examples to print per missed format / false positive")
    ap.add_argument("--json", type=Path, help="write the numbers here")
    ap.add_argument("--per-locale", type=int, default=60, help="Faker phone numbers per locale (0: skip the part)")
    ap.add_argument("--clean-per-family", type=int, default=800,
                    help="generated clean records per family (barcodes, ISBNs, versions, ...)")
    ap.add_argument("--ids-per-kind", type=int, default=300, help="generated identifiers per kind (0: skip)")
    ap.add_argument("--presidio", type=Path, default=PRESIDIO, help="presidio-research's synth_dataset_v2.json")
    ap.add_argument("--no-presidio", action="store_true", help="skip the held-out part (presidio and clean corpora)")
    ap.add_argument("--baseline-rev", default="54fde72", help="the commit whose redactor is the baseline")
    ap.add_argument("--ner-spacy", help="a spaCy model to load as the NER backend for PERSON / STREET_ADDRESS")
    args = ap.parse_args(argv)
    held_out = None if args.no_presidio else _held_out(args)

    t_start = time.perf_counter()
    rng = random.Random(args.seed)
    docs = load_carrier(args.scifact_docs)
    n_items = {k: int(v * args.scale) for k, v in {
        "EMAIL": 500, "PHONE": 800, "CARD": 600, "IBAN": 400, "IP": 400, "KEY": 700, "PEM": 40,
        "ASSIGN": 300, "GENERIC": 400, "HEX": 60}.items()}
    texts, plants = plant(docs, n_items, int(1500 * args.scale), rng)
    carrier = [t for _, t in docs]
    print(f"carrier: {len(docs)} documents, {sum(len(t.encode()) for t in carrier) / 1e6:.2f} MB "
          f"({sum(1 for s, _ in docs if s == 'shakespeare')} Shakespeare, "
          f"{sum(1 for s, _ in docs if s == 'scifact')} SciFact); planted {sum(map(len, plants))} values "
          f"(seed {args.seed})")

    redactor = PIIRedactor()
    results = redactor.redact_many(texts)
    carrier_results = PIIRedactor().redact_many(carrier)
    sc = score(texts, plants, results)
    carrier_only_fp = [carrier_span(t, s) for t, r in zip(carrier, carrier_results) for s in r.spans]
    sp = speed(carrier, texts, args.repeats)

    print("\nper kind (span level; found = a reported span covers the planted value; precision counts the real\n"
          "e-mails and phone numbers of the carrier text, listed below, against the redactor)")
    print(f"{'kind':8s} {'planted':>8s} {'found':>7s} {'recall':>7s} {'right kind':>10s} {'spans':>7s} "
          f"{'on PII':>7s} {'precision':>9s}")
    for k, row in sc["per_kind"].items():
        rec = f"{row['recall']:.4f}" if row["recall"] is not None else "-"
        prec = f"{row['precision']:.4f}" if row["precision"] is not None else "-"
        print(f"{k:8s} {row['planted']:8d} {row['found']:7d} {rec:>7s} {row['found_right_kind']:10d} "
              f"{row['spans']:7d} {row['spans_on_pii']:7d} {prec:>9s}")
    hexrow = sc["hex_unlabelled"]
    print(f"(unlabelled hex tokens, skipped by design: {hexrow['found']}/{hexrow['planted']} redacted)")

    groups: dict[str, list[tuple[str, dict[str, int]]]] = defaultdict(list)
    for f, row in sc["per_format"].items():
        groups[f.split("/")[0]].append((f, row))
    print("\nrecall by format group (formats below 1.0 listed)")
    for g, rows in groups.items():
        planted = sum(r["planted"] for _, r in rows)
        got = sum(r["found"] for _, r in rows)
        low = ", ".join(f"{f.split('/', 1)[1]} {r['found']}/{r['planted']}" for f, r in rows
                        if r["found"] < r["planted"])
        print(f"  {g:8s} {got:5d}/{planted:<5d} {got / planted:.4f}  {low}")
    keys = [(f, r) for f, r in sc["per_format"].items() if f.startswith("secret/") and not f.startswith(
        ("secret/assign_", "secret/pem_"))]
    k_planted, k_found = sum(r["planted"] for _, r in keys), sum(r["found"] for _, r in keys)
    print(f"  API keys (named formats, JWTs): {k_found}/{k_planted} = {k_found / k_planted:.4f}")

    neg = sc["negatives"]
    print(f"\nhard negatives: {neg['redacted']} of {neg['planted']} redacted")
    for f, row in neg["by_format"].items():
        if row["redacted"]:
            print(f"  {f}: {row['redacted']}/{row['planted']}  e.g. {neg['examples'][f][:args.show]}")
    in_words = [x for x in sc["carrier_fp"] + carrier_only_fp if x["in_words"]]
    by_kind = Counter(x["kind"] for x in carrier_only_fp)
    print(f"redactions in the carrier text alone (nothing planted): {len(carrier_only_fp)} "
          f"({', '.join(f'{k} {n}' for k, n in sorted(by_kind.items())) or 'none'}); with the planted values "
          f"around: {len(sc['carrier_fp'])}; inside ordinary words: {len(in_words)}")
    for x in carrier_only_fp:
        print(f"  {x['kind']}/{x['detector']}: {x['text']!r} in {x['context']!r}")
    seen = {(y["text"], y["kind"]) for y in carrier_only_fp}
    extra = [x for x in sc["carrier_fp"] if (x["text"], x["kind"]) not in seen]
    for x in extra + in_words:
        print(f"  near planted values, {x['kind']}/{x['detector']}: {x['text']!r} in {x['context']!r}")
    if args.show:
        for f, ex in sorted(sc["misses"].items()):
            print(f"  missed {f}: {[e for e in ex[:args.show]]}")

    print(f"\nspeed (best of {args.repeats}, fresh redactor each run)")
    for name in ("carrier", "with_pii"):
        row = sp[name]
        print(f"  {name:10s} {row['mb']:.2f} MB in {row['seconds']:.3f} s = {row['mb_per_s']:.1f} MB/s")
    for name in ("one_mb_shakespeare", "one_mb_scifact"):
        print(f"  {name}: {sp[name]['seconds']:.3f} s for one text of {sp[name]['chars']:,} characters")

    goals = {
        "recall_email>=0.99": sc["per_kind"]["EMAIL"]["recall"] >= 0.99,
        "recall_card>=0.99": sc["per_kind"]["CARD"]["recall"] >= 0.99,
        "recall_keys>=0.99": k_found / k_planted >= 0.99,
        "no_redaction_in_ordinary_words": not in_words,
        "one_mb_under_1s": max(sp["one_mb_shakespeare"]["seconds"], sp["one_mb_scifact"]["seconds"]) < 1.0,
    }
    locales = None
    if args.per_locale:
        from _redact_locales import report as locale_report  # bench/ is on sys.path when run as a script

        locales = locale_report(args.seed, args.per_locale, args.clean_per_family, DATA, PIIRedactor, args.show)
        kind = locales["per_kind"]
        goals.update({
            "faker_phone_recall>=0.95": kind["PHONE"]["recall"] >= 0.95,
            "faker_email_recall=1": kind["EMAIL"]["recall"] == 1.0,
            "faker_card_recall=1": kind["CARD"]["recall"] == 1.0,
            "credentials_url_recall>=0.95": kind["CRED_URL"]["recall"] >= 0.95,
            "credentials_prose_recall>=0.95": kind["CRED_PROSE"]["recall"] >= 0.95,
            "clean_fp_per_10k<1": locales["clean_generated_per_10k"] < 1.0,
        })
    if args.ids_per_kind:
        from _redact_ids import report as ids_report

        ids = ids_report(args.seed, args.ids_per_kind, PIIRedactor)
        goals["ids_labelled_recall>=0.98"] = min(r["labelled_recall"] for r in ids.values()) >= 0.98
        goals["ids_invalid_fp=0"] = sum(r["fp_invalid_id_dob"] for r in ids.values()) == 0
    if held_out is not None:
        phone = held_out["presidio"].get("PHONE_NUMBER", {}).get("held_out", {})
        goals["presidio_phone_held_out>=0.95"] = phone.get("new", 0) >= 0.95 * phone.get("n", 1)
        goals["clean_id_dob_fp=0"] = all(c["id_dob_spans"] == 0 for c in held_out["clean"].values())
    print("\ngoals: " + ", ".join(f"{k} {'OK' if v else 'MISSED'}" for k, v in goals.items()))
    print(f"(bench wall time {time.perf_counter() - t_start:.1f} s)")
    if args.json:
        payload = {"seed": args.seed, "scifact_docs": args.scifact_docs, "n_items": n_items, "scores": sc,
                   "carrier_only_fp": carrier_only_fp, "keys": {"planted": k_planted, "found": k_found},
                   "speed": sp, "goals": goals, "locales": locales, "held_out": held_out}
        args.json.write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
    return 0


def _held_out(args: argparse.Namespace) -> dict[str, Any]:
    """presidio-research and the clean corpora, this tree against ``--baseline-rev`` (printed first: it can
    exit 2 before anything long runs)."""
    from _redact_presidio import clean_corpora, clean_report, load_presidio, old_spans, presidio_report

    records = load_presidio(args.presidio)
    ner: Any = None
    if args.ner_spacy:
        import spacy

        ner = spacy.load(args.ner_spacy)
    texts = [r["full_text"] for r in records]
    red = PIIRedactor(ner=ner)
    new = [[s[:3] for s in red.detect(t)] for t in texts]
    pres = presidio_report(records, new, old_spans(REPO, args.baseline_rev, texts), args.ner_spacy)
    print(f"\nclean corpora (nothing planted; baseline {args.baseline_rev})")
    clean = {}
    for name, docs in clean_corpora(DATA).items():
        red = PIIRedactor()
        clean[name] = clean_report(name, docs, [[s[:3] for s in red.detect(t)] for t in docs],
                                   old_spans(REPO, args.baseline_rev, docs), args.show)
    return {"presidio": pres, "clean": clean}


if __name__ == "__main__":
    sys.exit(main())
