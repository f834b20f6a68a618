"""National identifiers, dates of birth, labelled phones and the optional NER backend of PIIRedactor.

Values with a check digit are published examples or were cross-checked with python-stdnum; each
invalid twin breaks only its check. Nothing here needs network or data outside the repository
(the clean-corpus test reads ../shared/data when present and skips otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextkit.compressors.redact import PIIRedactor
from contextkit.core.errors import InvalidArgumentError

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def _masked(text: str, value: str, kind: str, redactor: PIIRedactor | None = None) -> bool:
    """Whether ``value`` inside ``text`` is covered whole by one span of ``kind``."""
    s = text.index(value)
    e = s + len(value)
    return any(a <= s and b >= e and k == kind for a, b, k, _ in (redactor or PIIRedactor()).detect(text))


def _kinds_over(text: str, value: str) -> set[str]:
    s = text.index(value)
    e = s + len(value)
    return {k for a, b, k, _ in PIIRedactor().detect(text) if a < e and b > s}


class TestIssueExamples:
    """The forms issue 29 found passing through (all unmasked on 54fde72)."""

    def test_labelled_ssn(self) -> None:
        out = PIIRedactor().redact("SSN: 219-09-9999")
        assert out.text == "SSN: <ID_1>" and out.counts == {"ID": 1}

    @pytest.mark.parametrize(("text", "value"), [
        ("Personal Info:\nPhone:\n467 3395\n\nE-mail:\nJulieta", "467 3395"),
        ("Mobile: 737 219 628\nDesk: 5403926876\nFax: +41 (0)62 585 51 90", "5403926876"),
        ("PSC 3294\n2813882583 mobile\n+46 (0)8 928 571 38 fax", "2813882583"),
        ("Hungary 34796\n(37) 788-063-Office\\,07700 063 966-Fax", "(37) 788-063"),
        ("They're not answering at 78 651 450", "78 651 450"),
    ])
    def test_labelled_phones(self, text: str, value: str) -> None:
        assert _masked(text, value, "PHONE")
        assert value not in PIIRedactor().redact(text).text


class TestNationalIds:
    @pytest.mark.parametrize(("text", "value", "detector"), [
        ("Here's my SSN: 460-89-9847", "460-89-9847", "us_ssn"),
        ("His social security number is 853 37 1694.", "853 37 1694", "us_ssn"),
        ("ssn 219099999", "219099999", "us_ssn"),
        ("ITIN: 912-90-3456", "912-90-3456", "us_itin"),
        ("National Insurance number: AB123456C", "AB123456C", "uk_nino"),
        ("SIN: 558 073 029", "558 073 029", "ca_sin"),
        ("my aadhaar number is 2341 2341 2346", "2341 2341 2346", "in_aadhaar"),
        ("Steuer-ID: 36 574 261 809", "36 574 261 809", "de_steuer_id"),
        ("IdNr. 36574261809", "36574261809", "de_steuer_id"),
        ("Numéro de sécurité sociale : 2 95 10 99 126 111 93", "2 95 10 99 126 111 93", "fr_nir"),
        ("DNI: 54362315K", "54362315K", "es_dni"),
        ("NIE X2482300W", "X2482300W", "es_dni"),
        ("Codice fiscale: RCCMNL83S18D969H", "RCCMNL83S18D969H", "it_cf"),
        ("My driver's license number is F162823540116", "F162823540116", "us_dl"),
        ("my driver's license number is 2270-66-1551", "2270-66-1551", "us_dl"),
        ("DL# W734-637-21-487-2", "W734-637-21-487-2", "us_dl"),
    ])
    def test_valid_with_label(self, text: str, value: str, detector: str) -> None:
        spans = PIIRedactor().detect(text)
        assert [(text[a:b], k, d) for a, b, k, d in spans] == [(value, "ID", detector)]

    @pytest.mark.parametrize(("text", "value", "detector"), [
        ("Form received with 460-89-9847 attached.", "460-89-9847", "us_ssn"),
        ("The filing listed 912-90-3456 as the number.", "912-90-3456", "us_itin"),
        ("Payroll shows AB 12 34 56 C for March.", "AB 12 34 56 C", "uk_nino"),
        ("Dossier 2 95 10 99 126 111 93 transmis.", "2 95 10 99 126 111 93", "fr_nir"),
        ("Titular 54362315K confirmado.", "54362315K", "es_dni"),
        ("Intestatario RCCMNL83S18D969H, Milano.", "RCCMNL83S18D969H", "it_cf"),
    ])
    def test_distinctive_forms_need_no_label(self, text: str, value: str, detector: str) -> None:
        spans = PIIRedactor().detect(text)
        assert [(text[a:b], k, d) for a, b, k, d in spans] == [(value, "ID", detector)]

    @pytest.mark.parametrize(("text", "value"), [
        ("SSN: 000-12-3456", "000-12-3456"),      # area 000
        ("SSN: 666-12-3456", "666-12-3456"),      # area 666
        ("SSN: 123-00-4567", "123-00-4567"),      # group 00
        ("ITIN: 912-93-4567", "912-93-4567"),     # group 93 is not an ITIN group
        ("NINO: BG 12 34 56 C", "BG 12 34 56 C"),  # BG is never issued
        ("NINO: AB 12 34 56 E", "AB 12 34 56 E"),  # suffix A-D only
        ("Aadhaar: 2341 2341 2347", "2341 2341 2347"),
        ("Steuer-ID: 36574261808", "36574261808"),
        ("NIR 2 95 10 99 126 111 94", "2 95 10 99 126 111 94"),
        ("DNI: 54362315A", "54362315A"),
        ("Codice fiscale: RCCMNL83S18D969A", "RCCMNL83S18D969A"),
    ])
    def test_broken_check_is_not_an_id(self, text: str, value: str) -> None:
        assert "ID" not in _kinds_over(text, value)

    def test_sin_with_wrong_luhn_digit_is_not_an_id(self) -> None:
        assert _masked("SIN: 558 073 029", "558 073 029", "ID")
        assert "ID" not in _kinds_over("SIN: 558 073 028", "558 073 028")

    @pytest.mark.parametrize(("text", "value"), [
        ("Record 558 073 029 was updated.", "558 073 029"),         # a SIN needs its label
        ("Registered under 2341 2341 2346 last year.", "2341 2341 2346"),  # so does an Aadhaar
        ("Die Nummer 36574261809 steht im Bescheid.", "36574261809"),    # and a Steuer-ID
        ("the cannabinoid antagonist SR141716A reduced", "SR141716A"),   # a drug code shaped like a NINO
        ("Plate and F162823540116 noted.", "F162823540116"),             # a licence without its label
    ])
    def test_common_shapes_need_a_label(self, text: str, value: str) -> None:
        assert "ID" not in _kinds_over(text, value)

    def test_placeholders_and_restore(self) -> None:
        r = PIIRedactor(keep_mapping=True)
        text = "SSN: 219-09-9999, again 219-09-9999; DOB: 01/02/1980; see <ID_1> in the old note"
        out = r.redact(text)
        assert "219-09-9999" not in out.text and "01/02/1980" not in out.text
        assert out.counts == {"ID": 2, "DOB": 1}
        assert r.restore(out.text) == text

    def test_kinds_switch_off(self) -> None:
        text = "SSN: 219-09-9999, DOB: 01/02/1980"
        assert PIIRedactor(kinds=("EMAIL", "PHONE", "CARD", "IBAN", "IP", "SECRET")).redact(text).text == text


class TestDateOfBirth:
    @pytest.mark.parametrize(("text", "value"), [
        ("DOB: 01/02/1980", "01/02/1980"),
        ("DOB (mm/dd/yyyy): 01/02/1980", "01/02/1980"),
        ("She was born on 2/8/1935. Her maiden name is", "2/8/1935"),
        ("Date of birth: 12 March 1980", "12 March 1980"),
        ("born March 12, 1980 in Leeds", "March 12, 1980"),
        ("Birthday: 4th of July, 1990", "4th of July, 1990"),
        ("né le 12 mars 1980 à Lyon", "12 mars 1980"),
        ("geboren am 12.03.1980", "12.03.1980"),
        ("Geburtsdatum: 1980-03-12", "1980-03-12"),
        ("fecha de nacimiento: 12 de marzo de 1980", "12 de marzo de 1980"),
        ("nato il 3 maggio 1975", "3 maggio 1975"),
    ])
    def test_after_a_birth_label(self, text: str, value: str) -> None:
        assert _masked(text, value, "DOB")

    @pytest.mark.parametrize("text", [
        "The meeting was on 01/02/1980.",
        "She was born in 1977 in Leeds.",
        "DOB: 13/13/1980",
        "Patients born between 1990 and 2000 were enrolled on 12 March 2001.",
        "infants born on day 3 weighed less",
    ])
    def test_other_dates_stay(self, text: str) -> None:
        assert PIIRedactor().redact(text).text == text


class TestCleanText:
    SCIENCE = (
        "Rimonabant (SR141716A) and GW501516 were given at 10 mg/kg (p = 0.001, n = 219; 95% CI 0.91-1.09). "
        "Supported by NIH grant 5R01HL123456-02 and ERC 2019-AdG-834567; trial ISRCTN12345678, NCT01234567, "
        "GEO GSE123456, PMID 31234567, doi:10.1038/nature12373. CAS 7732-18-5 and 50-00-0. "
        "Samples collected 12/03/1980 to 2019-05-31; born cohorts of 1977; ISBN 978-3-16-148410-0; "
        "version 2.10.3; 36574261809 reads were aligned; 2341 2341 2346 molecules per cell; "
        "Office hours 9-17; 12 34 works; figure 3B (n = 5,580)."
    )

    def test_science_text_with_id_like_numbers_is_untouched(self) -> None:
        assert PIIRedactor().redact(self.SCIENCE).text == self.SCIENCE

    def test_numbers_followed_by_other_words_are_not_phones(self) -> None:
        for text in ("We counted 2813882583 cells.", "Desk: 12", "home: 1999 to 2003", "7 340 220 worked"):
            assert PIIRedactor().redact(text).text == text

    @pytest.mark.skipif(not (DATA / "beir_scifact" / "corpus.jsonl").is_file(), reason="../shared/data absent")
    def test_no_id_or_dob_in_scifact_and_peps(self) -> None:
        r = PIIRedactor(kinds=("ID", "DOB"))
        with (DATA / "beir_scifact" / "corpus.jsonl").open(encoding="utf-8") as fh:
            texts = [f"{rec['title']} {rec['text']}" for rec in map(json.loads, fh)]
        texts += [p.read_text(encoding="utf-8") for p in sorted((DATA / "python_peps" / "peps").glob("pep-*.rst"))]
        found = [(t[a:b], k) for t in texts for a, b, k, _ in r.detect(t)]
        assert found == []


class TestNerBackend:
    def test_callable_backend_and_its_kinds(self) -> None:
        def ner(text: str) -> list[tuple[int, int, str]]:
            out = []
            for name, label in (("Ines Garcia", "PERSON"), ("12 Baker Street", "STREET_ADDRESS"), ("Acme", "ORG")):
                i = text.find(name)
                if i >= 0:
                    out.append((i, i + len(name), label))
            return out

        text = "Ines Garcia of Acme lives at 12 Baker Street; mail ines@example.org"
        assert PIIRedactor(ner=ner).redact(text).text == "<NAME_1> of Acme lives at <ADDRESS_1>; mail <EMAIL_1>"
        assert PIIRedactor(ner=ner, kinds=("NAME", "EMAIL")).redact(text).text == \
            "<NAME_1> of Acme lives at 12 Baker Street; mail <EMAIL_1>"
        assert PIIRedactor().redact(text).text == "Ines Garcia of Acme lives at 12 Baker Street; mail <EMAIL_1>"

    def test_an_entity_loses_to_a_pattern(self) -> None:
        text = "Card 4111 1111 1111 1111 holder"
        r = PIIRedactor(ner=lambda t: [(0, len(t), "PERSON")])
        assert r.redact(text).text == "Card <CARD_1> holder"

    def test_spacy_pipeline(self) -> None:
        spacy = pytest.importorskip("spacy")
        nlp = spacy.blank("en")
        ruler = nlp.add_pipe("entity_ruler")
        ruler.add_patterns([
            {"label": "PERSON", "pattern": [{"LOWER": "ines"}, {"LOWER": "garcia"}]},
            {"label": "GPE", "pattern": "Lyon"},
            {"label": "FAC", "pattern": [{"IS_DIGIT": True}, {"IS_TITLE": True}, {"LOWER": "street"}]},
            {"label": "ORG", "pattern": "Acme"},
        ])
        r = PIIRedactor(ner=nlp)
        out = r.redact("Ines Garcia (Acme) lives at 12 Baker Street in Lyon; SSN: 219-09-9999")
        assert out.text == "<NAME_1> (Acme) lives at <ADDRESS_1> in <ADDRESS_2>; SSN: <ID_1>"
        assert r.to_dict()["ner"] == "spacy"
        with pytest.raises(InvalidArgumentError, match="pass it again"):
            PIIRedactor.from_dict(r.to_dict())
        again = PIIRedactor.from_dict(r.to_dict(), ner=nlp)
        assert again.redact("Ines Garcia").text == "<NAME_1>"

    def test_presidio_engine(self, tmp_path: Path) -> None:
        """A real Presidio AnalyzerEngine over a spaCy pipeline built here (no model download)."""
        spacy = pytest.importorskip("spacy")
        pytest.importorskip("presidio_analyzer")
        from presidio_analyzer import AnalyzerEngine
        from presidio_analyzer.nlp_engine import NlpEngineProvider

        nlp = spacy.blank("en")
        nlp.add_pipe("entity_ruler").add_patterns([
            {"label": "PERSON", "pattern": [{"LOWER": "ines"}, {"LOWER": "garcia"}]},
            {"label": "GPE", "pattern": "Lyon"}])
        nlp.to_disk(tmp_path / "pipeline")
        provider = NlpEngineProvider(nlp_configuration={
            "nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": str(tmp_path / "pipeline")}]})
        engine = AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=["en"])
        r = PIIRedactor(ner=engine)
        assert r.redact("Ines Garcia lives in Lyon; SSN: 219-09-9999").text == "<NAME_1> lives in <ADDRESS_1>; SSN: <ID_1>"
        assert r.to_dict()["ner"] == "presidio_engine"
        with pytest.raises(InvalidArgumentError, match="pass it again"):
            PIIRedactor.from_dict(r.to_dict())

    def test_settings_without_ner_are_unchanged(self) -> None:
        assert "ner" not in PIIRedactor().to_dict()

    def test_unknown_backend(self) -> None:
        with pytest.raises(InvalidArgumentError, match="unknown ner backend"):
            PIIRedactor(ner="flair")
        with pytest.raises(InvalidArgumentError, match="ner must be"):
            PIIRedactor(ner=42)

    def test_presidio_missing_is_a_clear_error(self) -> None:
        try:
            import presidio_analyzer  # noqa: F401
        except ImportError:
            with pytest.raises(InvalidArgumentError, match=r"contextkit\[ner\]"):
                PIIRedactor(ner="presidio")
        else:
            pytest.skip("presidio-analyzer is installed")
