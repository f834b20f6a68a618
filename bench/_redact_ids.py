"""The identifier part of ``bench_redact.py``: generated national identifiers, dates of birth and
labelled phone numbers in sentence templates, valid and invalid.

Every identifier kind the redactor knows is generated with its real structure and its check digit
computed (seeded RNG), then planted in sentences, with a label naming it ("SSN:", "Steuer-ID",
"né le") and without one. The *invalid* twin of each value breaks only its rule or checksum (a
wrong check digit, area 000/666, a wrong DNI letter), so a detector that ignores the check masks it.

Reported: recall on valid values with a label, recall on valid values without one (kinds that need
a label are expected near 0 there, by design), and false positives on invalid values (any reported
span overlapping one), per kind. These generators and templates are the tuning set of the ID, DOB
and phone-label rules; the presidio-research part of the bench is the held-out check.
"""

from __future__ import annotations

import random
import string
from collections import Counter
from collections.abc import Callable
from typing import Any

from contextkit.compressors._pii_national import cf_check, nir_key, steuer_id_check, verhoeff_ok

Gen = Callable[[random.Random, bool], str]  # (rng, valid) -> value as written


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def _luhn_digit(body: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return str((10 - total % 10) % 10)


def _wrong(rng: random.Random, right: str, alphabet: str = string.digits) -> str:
    return rng.choice([c for c in alphabet if c != right])


def gen_ssn(rng: random.Random, valid: bool) -> str:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    group, serial = rng.randint(1, 99), rng.randint(1, 9999)
    if not valid:
        which = rng.randrange(3)
        area = rng.choice((0, 666)) if which == 0 else area
        group = 0 if which == 1 else group
        serial = 0 if which == 2 else serial
    sep = rng.choice(("-", "-", "-", " ", ""))
    return f"{area:03d}{sep}{group:02d}{sep}{serial:04d}"


def gen_itin(rng: random.Random, valid: bool) -> str:
    groups = [*range(50, 66), *range(70, 89), 90, 91, 92, *range(94, 100)]
    group = rng.choice(groups) if valid else rng.choice([g for g in range(10, 100) if g not in groups])
    return f"9{_digits(rng, 2)}-{group:02d}-{rng.randint(1, 9999):04d}"


_NINO_FIRST = "ABCEGHJKLMNOPRSTWXYZ"
_NINO_SECOND = "ABCEGHJKLMNPRSTWXYZ"


def gen_nino(rng: random.Random, valid: bool) -> str:
    while True:
        prefix = rng.choice(_NINO_FIRST) + rng.choice(_NINO_SECOND)
        if prefix not in ("BG", "GB", "KN", "NK", "NT", "TN", "ZZ"):
            break
    suffix = rng.choice("ABCD")
    if not valid:
        prefix = rng.choice(("BG", "GB", "NK", "TN", "ZZ", "D" + prefix[1], "Q" + prefix[1]))
    d = _digits(rng, 6)
    return f"{prefix} {d[:2]} {d[2:4]} {d[4:]} {suffix}" if rng.random() < 0.5 else f"{prefix}{d}{suffix}"


def gen_sin(rng: random.Random, valid: bool) -> str:
    body = rng.choice("1234567 9".replace(" ", "")) + _digits(rng, 7)
    check = _luhn_digit(body)
    d = body + (check if valid else _wrong(rng, check))
    sep = rng.choice((" ", "-", ""))
    return f"{d[:3]}{sep}{d[3:6]}{sep}{d[6:]}"


def gen_aadhaar(rng: random.Random, valid: bool) -> str:
    body = rng.choice("23456789") + _digits(rng, 10)
    check = next(c for c in string.digits if verhoeff_ok(body + c))
    d = body + (check if valid else _wrong(rng, check))
    sep = rng.choice((" ", " ", "-", ""))
    return f"{d[:4]}{sep}{d[4:8]}{sep}{d[8:]}"


def gen_steuer_id(rng: random.Random, valid: bool) -> str:
    digits = rng.sample(string.digits, 9)
    while digits[0] == "0":
        rng.shuffle(digits)
    twice = rng.choice(digits)
    first10 = digits + [twice]
    rest = first10[1:]
    rng.shuffle(rest)
    d10 = first10[0] + "".join(rest)
    check = str(steuer_id_check(d10))
    d = d10 + (check if valid else _wrong(rng, check))
    return f"{d[:2]} {d[2:5]} {d[5:8]} {d[8:]}" if rng.random() < 0.4 else d


def gen_nir(rng: random.Random, valid: bool) -> str:
    dept = rng.choice([f"{n:02d}" for n in range(1, 96) if n != 20] + ["2A", "2B"])
    body = f"{rng.choice('12')}{_digits(rng, 2)}{rng.randint(1, 12):02d}{dept}{_digits(rng, 6)}"
    key = nir_key(body)
    if not valid:
        key = (key + rng.randint(1, 96)) % 97 or 1
    v = body + f"{key:02d}"
    return " ".join((v[0], v[1:3], v[3:5], v[5:7], v[7:10], v[10:13], v[13:])) if rng.random() < 0.6 else v


def gen_dni(rng: random.Random, valid: bool) -> str:
    letters = "TRWAGMYFPDXBNJZSQVHLCKE"
    if rng.random() < 0.7:
        num = _digits(rng, 8)
        head = num
    else:
        lead = rng.choice("XYZ")
        head = lead + _digits(rng, 7)
        num = str("XYZ".index(lead)) + head[1:]
    letter = letters[int(num) % 23]
    return head + (letter if valid else _wrong(rng, letter, letters))


_CF_MONTHS = "ABCDEHLMPRST"


def gen_cf(rng: random.Random, valid: bool) -> str:
    day = rng.randint(1, 28) + rng.choice((0, 40))
    body = ("".join(rng.choice(string.ascii_uppercase) for _ in range(6)) + _digits(rng, 2)
            + rng.choice(_CF_MONTHS) + f"{day:02d}" + rng.choice(string.ascii_uppercase) + _digits(rng, 3))
    check = cf_check(body)
    return body + (check if valid else _wrong(rng, check, string.ascii_uppercase))


def gen_dl(rng: random.Random, valid: bool) -> str:
    """US state formats (no checksum: the invalid twin is the same shape; it is not scored)."""
    fmt = rng.randrange(5)
    if fmt == 0:
        return rng.choice(string.ascii_uppercase) + _digits(rng, 7)  # CA, NY-style
    if fmt == 1:
        return _digits(rng, 9)
    if fmt == 2:
        d = _digits(rng, 12)
        return f"{rng.choice(string.ascii_uppercase)}{d[:3]}-{d[3:6]}-{d[6:8]}-{d[8:11]}-{d[11]}"  # FL
    if fmt == 3:
        return f"{_digits(rng, 4)}-{_digits(rng, 2)}-{_digits(rng, 4)}"
    return rng.choice(string.ascii_uppercase) + _digits(rng, 12)


_MONTHS_EN = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
              "November", "December")


def gen_dob(rng: random.Random, valid: bool) -> str:
    y, m, d = rng.randint(1930, 2010), rng.randint(1, 12), rng.randint(1, 28)
    if not valid:  # an impossible date: month 13-19 and day 32-39
        m, d = rng.randint(13, 19), rng.randint(32, 39)
        return rng.choice((f"{d}/{m}/{y}", f"{y}-{m}-{d}", f"{d}.{m}.{y}"))
    return rng.choice((f"{m}/{d}/{y}", f"{d:02d}.{m:02d}.{y}", f"{y}-{m:02d}-{d:02d}", f"{d} {_MONTHS_EN[m - 1]} {y}",
                       f"{_MONTHS_EN[m - 1]} {d}, {y}", f"{d:02d}/{m:02d}/{y}"))


#: kind -> (generator, labelled templates, unlabelled templates, whether a label is required by design)
KINDS: dict[str, tuple[Gen, tuple[str, ...], tuple[str, ...], bool]] = {
    "us_ssn": (gen_ssn, ("SSN: {v}", "My social security number is {v}.", "Social Security No. {v} on file",
                         "ssn {v}", "The applicant's SSN is {v}, verified."),
               ("Please record {v} before the visit.", "Form received with {v} attached."), False),
    "us_itin": (gen_itin, ("ITIN: {v}", "my individual taxpayer identification number is {v}"),
                ("The filing listed {v} as the number.",), False),
    "uk_nino": (gen_nino, ("National Insurance number: {v}", "NINO {v}", "her NI number is {v}."),
                ("Payroll shows {v} for March.",), False),
    "ca_sin": (gen_sin, ("SIN: {v}", "Social insurance number {v}", "numéro d'assurance sociale : {v}"),
               ("Record {v} was updated.",), True),
    "in_aadhaar": (gen_aadhaar, ("Aadhaar: {v}", "my aadhaar number is {v}", "UIDAI no. {v}"),
                   ("Registered under {v} last year.",), True),
    "de_steuer_id": (gen_steuer_id, ("Steuer-ID: {v}", "Steueridentifikationsnummer {v}", "IdNr. {v}"),
                     ("Die Nummer {v} steht im Bescheid.",), True),
    "fr_nir": (gen_nir, ("Numéro de sécurité sociale : {v}", "NIR {v}", "N° SS : {v}"),
               ("Dossier {v} transmis.",), False),
    "es_dni": (gen_dni, ("DNI: {v}", "NIE {v}", "con DNI {v} y domicilio"), ("Titular {v} confirmado.",), False),
    "it_cf": (gen_cf, ("Codice fiscale: {v}", "cod. fisc. {v}"), ("Intestatario {v}, Milano.",), False),
    "us_dl": (gen_dl, ("My driver's license number is {v}", "Driver License: {v}", "DL# {v}",
                       "driving licence no. {v}"), ("Plate and {v} noted.",), True),
    "dob": (gen_dob, ("DOB: {v}", "Date of birth: {v}", "She was born on {v}.", "born {v} in Leeds",
                      "Birthday: {v}", "Geburtsdatum: {v}"), ("The meeting was on {v}.", "Updated {v}."), True),
}


def _scored(redactor: Any, template: str, value: str) -> tuple[bool, bool, bool]:
    """(fully masked, touched by an ID or DOB span, touched by any span) for ``value`` planted in ``template``."""
    text = template.format(v=value)
    s = text.index(value)
    e = s + len(value)
    spans = redactor.detect(text)
    need = [i for i in range(s, e) if text[i].isalnum()]
    covered = {i for a, b, _, _ in spans for i in range(a, b)}
    over = [k for a, b, k, _ in spans if a < e and b > s]
    return all(i in covered for i in need), bool({"ID", "DOB"} & set(over)), bool(over)


def _or_dash(kind: str, n: int) -> str:
    return "-" if kind == "us_dl" else str(n)


def report(seed: int, per_kind: int, make: Callable[..., Any]) -> dict[str, Any]:
    """Recall and false positives per kind; ``make(**kw)`` builds a redactor (new kinds vs old in the same run)."""
    rng = random.Random(seed)
    new, old = make(), make(kinds=("EMAIL", "PHONE", "CARD", "IBAN", "IP", "SECRET"))
    out: dict[str, Any] = {}
    print(f"\ngenerated identifiers ({per_kind} valid and {per_kind} invalid per kind, seed {seed}; "
          "this set tuned the ID/DOB rules)")
    print("(recall: the valid value fully masked; FP: an invalid twin touched by an ID/DOB span, or by any span,\n"
          " e.g. a phone; (old): this code with only the six kinds of before issue 29, EMAIL ... SECRET)")
    print(f"{'kind':13s} {'labelled':>9s} {'(old)':>6s} {'unlabelled':>10s} {'label needed':>12s} "
          f"{'FP ID/DOB':>9s} {'FP any':>6s} {'(old)':>6s}")
    for kind, (gen, labelled, bare, needs_label) in KINDS.items():
        counts: Counter[str] = Counter()
        for i in range(per_kind):
            v, bad = gen(rng, True), gen(rng, False)
            lt, bt = labelled[i % len(labelled)], bare[i % len(bare)]
            counts["lab"] += _scored(new, lt, v)[0]
            counts["lab_old"] += _scored(old, lt, v)[0]
            counts["bare"] += _scored(new, bt, v)[0]
            if kind != "us_dl":  # no checksum: an "invalid" licence does not exist
                for t in (lt, bt):
                    _, by_id, by_any = _scored(new, t, bad)
                    counts["fp"] += by_id
                    counts["fp_any"] += by_any
                    counts["fp_any_old"] += _scored(old, t, bad)[2]
        n = per_kind
        out[kind] = {"labelled_recall": counts["lab"] / n, "labelled_recall_old": counts["lab_old"] / n,
                     "unlabelled_recall": counts["bare"] / n, "label_required": needs_label,
                     "fp_invalid_id_dob": counts["fp"], "fp_invalid_any": counts["fp_any"],
                     "fp_invalid_any_old": counts["fp_any_old"],
                     "invalid_planted": 0 if kind == "us_dl" else 2 * n}
        print(f"{kind:13s} {counts['lab'] / n:9.3f} {counts['lab_old'] / n:6.3f} {counts['bare'] / n:10.3f} "
              f"{'yes' if needs_label else 'no':>12s} {_or_dash(kind, counts['fp']):>9s} "
              f"{_or_dash(kind, counts['fp_any']):>6s} {_or_dash(kind, counts['fp_any_old']):>6s}")
    return out
