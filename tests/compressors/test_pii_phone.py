"""PHONE through libphonenumber (issue 20): national formats of many regions, extensions, the regions
setting, and the clean numbers that must stay (dates, versions, ISBNs, order numbers, barcodes)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from contextkit.compressors.redact import PIIRedactor
from contextkit.errors import ContextkitError, InvalidArgumentError


def phones(text: str, **kw) -> list[str]:
    return [text[s.start:s.end] for s in PIIRedactor(**kw).redact(text).spans if s.kind == "PHONE"]


class TestPhoneFormats:
    @pytest.mark.parametrize("value", [
        # missed by the old patterns: NANP with extensions, sv_SE, pl_PL, pt_BR, ru_RU, en_AU, nl_NL, pt_PT, CN
        "(590)550-7590x631", "001-214-861-8792x685", "206.269.0743x9150", "+1-780-563-6083x7783",
        "(235) 337-4068 x124", "555-123-4567 ext. 89", "609 141 777", "(11) 91234-5678", "8 (066) 907-43-91",
        "8 812 415 86 83", "(08)-8690-7366", "(0406)-812415", "00420 702 914 177", "(351) 969141777",
        "15191417776",
    ])
    def test_found_whole(self, value):
        text = f"Please call {value} after lunch."
        assert phones(text) == [value], PIIRedactor().detect(text)

    @pytest.mark.parametrize("value", [
        "08-170 669 07", "+46 (0)24 15 86 83", "0353-37 40 68", "+48 736 317 066", "+55 61 9141-7776",
        "+7 (914) 177-76-31", "080-9141-7776", "090-3915-0008", "02 4177 7631", "+61.437.406.812",
        "0837 783533", "+31(0)83-4497869", "+44(0)115 4960914", "(0161) 4960066", "04 15 39 15 00",
        "+33 (0)1 41 63 60 83", "+34 948 812 415", "041-914-1777", "+90 (286) 5707049", "+358 58 6834497",
    ])
    def test_formats_the_old_patterns_found_are_kept(self, value):  # a regression guard for the rewrite
        text = f"Please call {value} after lunch."
        assert phones(text) == [value], PIIRedactor().detect(text)

    def test_a_phone_word_lets_shorter_numbers_in(self):
        assert phones("Tel. 3533 7406 or mobile 91 41 77 76.") == ["3533 7406", "91 41 77 76"]

    def test_two_numbers_in_one_run(self):
        assert phones("Tel.: +31-20-5665-633; fax: +31-20-914-738; ok") == ["+31-20-5665-633", "+31-20-914-738"]


class TestPhoneNegatives:
    """Precision guards: the old patterns left these alone too; they fail if the matcher over-reaches."""

    @pytest.mark.parametrize("text", [
        "Released 2023-01-15, updated 15/01/2023 and 01.02.2023 at 12:30:45.",
        "ISBN 978-3-16-148410-0 and ISBN 0-306-40615-2, ISBN 0306406152.",
        "Order #112-4567890-1234567 and order no. 10023456, invoice INV-0238-44599.",
        "EAN 4006381333931, UPC 036000291452.", "Range 1990-2000, pages 123-456, from 1900-2000.",
        "version 3.11.4.1, build 0320.776.42, kernel 5.15.0-91-generic.",
        "Total 1.234.567,89 € or $1,234,567.00 or 12 345 678 kr.",
        "p = 0.0017 (95% CI 1.23-4.56), n = 12345; 576 900 (330 000-701 200) cases.",
        "frequency 3411154800 Hz, x = 3735928559; binary ``0101111111``.",
        "Numbers 05 10 15 20 rose.", "NCT00003026 and PMID 12345678.",
    ])
    def test_clean_numbers_stay(self, text):
        assert phones(text) == [], PIIRedactor().detect(text)


class TestPhoneRegions:
    def test_regions_decide_national_formats_international_ones_always_found(self):
        text = "Ring 08-170 669 07 or +46 8 170 669 07."
        assert phones(text, phone_regions=["US"]) == ["+46 8 170 669 07"]
        assert phones(text, phone_regions=["se"]) == ["08-170 669 07", "+46 8 170 669 07"]

    @pytest.mark.parametrize("bad", [["XX"], ["US", "Atlantis"]])
    def test_unknown_regions_are_refused_clearly(self, bad):
        with pytest.raises(InvalidArgumentError, match="unknown phone regions") as info:
            PIIRedactor(phone_regions=bad)
        assert isinstance(info.value, ContextkitError)

    def test_phonenumbers_is_imported_lazily(self):
        code = ("import sys, contextkit.compressors.redact as r; p = r.PIIRedactor(); "
                "assert 'phonenumbers' not in sys.modules; p.redact('no digits here'); "
                "assert 'phonenumbers' not in sys.modules; p.redact('call 020 7946 0958'); "
                "assert 'phonenumbers' in sys.modules")
        subprocess.run([sys.executable, "-c", code], check=True)
