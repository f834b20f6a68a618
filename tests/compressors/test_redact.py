"""PIIRedactor: each detector on real-looking values and hard negatives, placeholders, restore, overlaps."""

from __future__ import annotations

import copy
import json
import pickle
import re
import time

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from contextkit.compressors._pii_phone import phone_finder
from contextkit.compressors.base import CompressionReport
from contextkit.compressors.redact import (
    KINDS,
    PIIRedactor,
    RedactionResult,
    RestoreUnavailableError,
    _find_card,
    _Scan,
)

_find_phone = phone_finder(PIIRedactor().config.phone_regions)  # a detector over the default regions

PLACEHOLDER = re.compile(r"<(EMAIL|PHONE|CARD|IBAN|IP|SECRET)_([1-9]\d*)>")


def found(text: str, **kw) -> list[tuple[str, str]]:
    """(value, kind) of every span a fresh redactor masks in ``text``."""
    res = PIIRedactor(**kw).redact(text)
    return [(text[s.start:s.end], s.kind) for s in res.spans]


def masks(value: str, kind: str, before: str = "Please use ", after: str = " from now on.") -> None:
    text = f"{before}{value}{after}"
    assert found(text) == [(value, kind)], (text, found(text))


def untouched(text: str) -> None:
    res = PIIRedactor().redact(text)
    assert res.text == text and not res.spans, [(text[s.start:s.end], s.kind, s.detector) for s in res.spans]


class TestEmail:
    @pytest.mark.parametrize("value", [
        "bob.smith@example.com", "alice+news@mail.example.co.uk", "J.Doe@Example.ORG", "x_y-z@sub.uni-heidelberg.de",
        "o'brien@example.ie".replace("'", ""), "user123@startup.io", "josé.garcía@correo.es",
    ])
    def test_formats(self, value):
        masks(value, "EMAIL")

    def test_in_angle_brackets_and_sentence_end(self):
        assert found("Alice <alice@example.com>.") == [("alice@example.com", "EMAIL")]
        assert found("write to bob@example.com.") == [("bob@example.com", "EMAIL")]

    @pytest.mark.parametrize(("text", "value"), [
        ("/tmp/john.doe@example.com.ck-index", "john.doe@example.com.ck"),
        ("msg-frank@example.co.uk-1", "msg-frank@example.co.uk"),
        ("folder bob@example.org-backup here", "bob@example.org"),
    ])
    def test_followed_by_a_hyphen_in_a_path_or_id(self, text, value):
        """On 0cf31da an address followed by ``-`` and a letter (an index folder named after its
        owner: ``john.doe@example.com.ck-index``) was not found at all and reached CLI errors raw."""
        assert found(text) == [(value, "EMAIL")]

    @pytest.mark.parametrize("text", [
        "an @mention and user@ alone", "a@b", "email me at example dot com", "x..y@example.com is broken",
        "the price is 5@10", "see @example.com",
    ])
    def test_negatives(self, text):
        assert all(kind != "EMAIL" for _, kind in found(text))


class TestPhone:
    @pytest.mark.parametrize("value", [
        "(555) 123-4567", "555-123-4567", "555.987.6543", "1-800-555-0199", "+1 (555) 123-4567",
        "+1-555-123-4567", "+44 20 7946 0958", "+44 (0)20 7946 0958", "+44 7700 900123", "020 7946 0958",
        "07700 900123", "+33 1 23 45 67 89", "06 12 34 56 78", "06.12.34.56.78", "+49 (0)30 1234 5678",
        "030 12345678", "0171 1234567", "+31 20 123 4567", "020-1234567", "+91 98765 43210", "+4915112345678",
        "+55 11 91234-5678",
    ])
    def test_formats(self, value):
        masks(value, "PHONE", before="Call me on ", after=", thanks.")

    @pytest.mark.parametrize("text", [
        "In 1999 and 2023 it rained.", "Released 2023-01-15, updated 15/01/2023 and 01.02.2023.",
        "Version 1.2.3.4.5 and v2.10.3.", "ISBN 978-3-16-148410-0 and ISBN 0-306-40615-2.",
        "The id 123456789012 and order 5551234567890.", "p < 0.001 (n = 1234), 95% CI 1.23-4.56.",
        "Range 1990-2000, pages 123-456.", "At 12:30:45 on 2020-02-02 12:00:00.",
        "Values +1.23 4.56 7.89 were seen.", "Numbers 05 10 15 20 rose.",
    ])
    def test_negatives(self, text):
        untouched(text)

    def test_not_the_tail_of_a_card_like_run(self):
        untouched("x 4669 0923 4139 8847 y")  # fails Luhn; "0923 4139 8847" is not a national number here


class TestCard:
    @pytest.mark.parametrize("value", [
        "4111 1111 1111 1111", "4111-1111-1111-1111", "4012888888881881", "5555 5555 5555 4444",
        "2223 0031 2200 3222", "3782 822463 10005", "371449635398431", "6011 1111 1111 1117",
        "3056 930902 5904", "3530 1113 3330 0000", "6200 0000 0000 0005", "4222 2222 2222 2",
    ])
    def test_formats(self, value):
        masks(value, "CARD", before="Paid with card ", after=" yesterday.")

    def test_expiry_after_the_number(self):
        assert found("Card 4111 1111 1111 1111 12/25.") == [("4111 1111 1111 1111", "CARD")]

    @pytest.mark.parametrize("text", [
        "Bad card 4111 1111 1111 1112 here.",  # Luhn fails
        "Id 1234567890123456 here.",  # Luhn fails, no IIN
        "Run 4111111111111111111111 here.",  # part of a longer number
        "Code 9111 1111 1111 1111 here.",  # Luhn-valid length but no known IIN prefix
        "Mixed 4111 1111-1111 1111 separators.",
        "x 4121 1488 0508 6371 414 y",  # a 19-digit number whose first 16 digits pass Luhn
        "Account DE59 2344 8783 9938 2001 47 (bad IBAN) here.",
    ])
    def test_negatives(self, text):
        untouched(text)

    def test_card_beats_phone(self):
        text = "Card 0171 1234567 and 5105 1051 0510 5100 on file."
        scan = _Scan(text)
        assert _find_card(scan) and _find_phone(scan)  # both detectors fire somewhere in this text
        overlap = "+1 5105 1051 0510 5100"
        scan = _Scan(overlap)
        assert _find_card(scan)
        res = PIIRedactor().redact(overlap)
        assert [s.kind for s in res.spans] == ["CARD"]
        assert res.text == "+1 <CARD_1>"


class TestIban:
    @pytest.mark.parametrize("value", [
        "DE89 3704 0044 0532 0130 00", "DE89370400440532013000", "GB82 WEST 1234 5698 7654 32",
        "GB82WEST12345698765432", "FR14 2004 1010 0505 0001 3M02 606", "NL91ABNA0417164300", "BE68 5390 0754 7034",
        "CH93 0076 2011 6238 5295 7", "NO9386011117947",
    ])
    def test_formats(self, value):
        masks(value, "IBAN", before="IBAN: ", after=" (main account).")

    @pytest.mark.parametrize("text", [
        "Bad DE89 3704 0044 0532 0130 01 here.", "Bad GB83WEST12345698765432 here.",
        "Short DE89 3704 0044 here.", "Unknown XX89370400440532013000 here.",
    ])
    def test_negatives(self, text):
        assert all(kind != "IBAN" for _, kind in found(text))
        assert all(kind != "SECRET" for _, kind in found(text))  # an IBAN with a typo is not a "secret"


class TestIp:
    @pytest.mark.parametrize("value", [
        "192.168.1.10", "10.0.0.1", "8.8.8.8", "255.255.255.255", "2001:db8::8a2e:370:7334",
        "fe80::1ff:fe23:4567:890a", "2001:0db8:85a3:0000:0000:8a2e:0370:7334", "::ffff:192.0.2.128",
    ])
    def test_formats(self, value):
        masks(value, "IP", before="Request from ", after=" was blocked.")

    def test_ip_before_port_and_prefix(self):
        assert found("host 10.1.2.3:8080 and net 192.0.2.0/24") == [("10.1.2.3", "IP"), ("192.0.2.0", "IP")]

    @pytest.mark.parametrize("text", [
        "Octets 256.1.2.3 and 10.0.0.300 are invalid.", "Version 1.2.3.4.5 and v1.2.3.4 and v2.10.3.",
        "requires python >= 3.11.4.1", "version 3.3.0.1 released", "Section 6.3.2.3 says", "EC 1.14.16.2 enzyme",
        "Leading zeros 01.02.03.04 here.", "Time 12:30:45 and ratio 1:2:3.", "Slice ham[1::3] and std::vector.",
        "MAC 00:1a:2b:3c:4d:5e here.",
    ])
    def test_negatives(self, text):
        untouched(text)


class TestKeySecrets:
    @pytest.mark.parametrize("value,detector", [
        ("AKIAIOSFODNN7EXAMPLE", "aws_access_key_id"),
        ("ghp_1234567890abcdefghijklmnopqrstuvwxyzAB", "github_token"),
        ("gho_16C7e42F292c6912E7710c838347Ae178B4a", "github_token"),
        ("github_pat_11ABCDEFG0123456789abc_defghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX1234567", "github_pat"),
        ("xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "slack_token"),
        ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe_key"),
        ("pk_live_51H8xYzAbCdEf1234567890", "stripe_key"),
        ("sk_test_26PHem9AhJZvU623DfE1x4sd", "stripe_key"),
        ("sk-proj-AbCdEf1234567890GhIjKlMnOpQrStUvWx", "openai_key"),
        ("sk-4fG7hJ9kL2mN5pQ8rS1tV3wX6yZ0aB2cD4eF6gH8iJ0kL2m", "openai_key"),
        ("AIzaSyD-1234567890abcdefghijklmnopqrstu", "google_api_key"),
        ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
         "jwt"),
        ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz12345678", "huggingface_token"),
    ])
    def test_formats(self, value, detector):
        text = f"config uses {value} for now"
        res = PIIRedactor().redact(text)
        assert [(text[s.start:s.end], s.kind, s.detector) for s in res.spans] == [(value, "SECRET", detector)]

    def test_private_key_block_is_one_span(self):
        block = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi\n"
                 "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB\n-----END RSA PRIVATE KEY-----")
        text = f"key:\n{block}\nthanks"
        res = PIIRedactor().redact(text)
        assert [(text[s.start:s.end], s.detector) for s in res.spans] == [(block, "private_key")]
        assert res.text == "key:\n<SECRET_1>\nthanks"

    def test_bearer_header(self):
        assert found("Authorization: Bearer abcDEF123456ghiJKL789012mno") == [("abcDEF123456ghiJKL789012mno", "SECRET")]

    @pytest.mark.parametrize("text", [
        "The AKIA prefix and TAKIAIOSFODNN7EXAMPLE9 inside a word.", "AKIAXXXXXXXXXXXXXXXX is the doc stand-in.",
        "risk-assessment-of-the-whole-thing", "the ghp_ prefix alone", "sk_live_ alone", "eyJ alone",
        "ask-questions-about-everything-here", "a bearer of bad news",
    ])
    def test_negatives(self, text):
        untouched(text)


class TestAssignments:
    @pytest.mark.parametrize("text,value", [
        ("password=hunter2", "hunter2"),
        ("DB_PASSWORD=Tr0ub4dor&3", "Tr0ub4dor&3"),
        ('{"api_key": "3f9a0c1d2e3f4a5b6c7d8e9f"}', "3f9a0c1d2e3f4a5b6c7d8e9f"),
        ("secret: 'my secret phrase'", "my secret phrase"),
        ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
         "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        ("client_secret = \"s3cr3t-value\"", "s3cr3t-value"),
        ("Password: Sup3rS3cret!", "Sup3rS3cret!"),
        ("https://api.example.com/items?limit=20&access_token=Ab12Cd34Ef56Gh78", "Ab12Cd34Ef56Gh78"),
        ("dbPassword=correcthorsebatterystaple", "correcthorsebatterystaple"),
        ("password=WzjlAkZEbk", "WzjlAkZEbk"),
    ])
    def test_values(self, text, value):
        assert found(text) == [(value, "SECRET")]

    @pytest.mark.parametrize("text", [
        "Forgot your password? Reset it.", "The password alone, a secret, a token, an api key.",
        "Password: Click here to continue.", "We must talk in secret:--nurse, come back again;",
        "connect(user=user, password=password)", "password=user.password", "token = self.token",
        "pwd = os.getcwd()", 'api_key: "<your-api-key>"', "password=${DB_PASSWORD}", "secret: xxxx",
        "password = None", "bypass=abc12345", "primary_key=True", "max_tokens=512", "token: 2048",
        "the secretary: Jane Doe", "passport: see the office",
    ])
    def test_negatives(self, text):
        untouched(text)


class TestGenericSecrets:
    @pytest.mark.parametrize("value", [
        "a8Fk2LmQ9xZ3pR7tY1wBc4Vn", "Zk3hY0rT8qLw2VnX5mB9cD1fG4jH7kP0sU3eR6aW", "dGhpcyBpcyBhIHNlY3JldCBrZXkgMTIzNA==",
        "-fCW8H1NOtkVtvGLEpL5f9euqliVPXv72vN-B6UnNp", "QGwsXi3dVHFIE4h3/uHonT64+wskhvDm7XL",
    ])
    def test_random_tokens(self, value):
        masks(value, "SECRET", before="use ", after=" here")

    @pytest.mark.parametrize("text", [
        "internationalization counterrevolutionaries electroencephalography",
        "getElementsByClassName AbstractSingletonProxyFactoryBean PyObject_ClearWeakRefs XMLHttpRequestUpload2024",
        "N-acetyl-5-methoxytryptamine and 3-hydroxy-3-methylglutaryl and CD14++CD16+monocytes",
        "cp33-cp33m-linux_x86_64 and x86_64-unknown-linux-gnu and aarch64-apple-darwin",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b and uuid 123e4567-e89b-12d3-a456-426614174000",
        "sha256=2dc6b5a470a1bde68946f263f1af1515a2574a150a30d6ce02c6ff742fcc0db8",
        "md5=nWt-Dge1eug4iAgqLS_uWg,9544",
        "see https://github.com/python/cpython/blob/27c0d9b54abaa4112d5a317b8aa78b39ad60a808/Lib/ast.py",
        "see https://docs.google.com/document/d/1vpMse4c6DrWH5rq2tQSx3qwP_m_0lyn-Ij4WHqQqRHY/edit",
        "/usr/local/lib/python3.11/site-packages/numpy and state-of-the-art-methods-everywhere",
        "Gln356Pro871Glu1038Ser1613 haplotype",
    ])
    def test_negatives(self, text):
        untouched(text)

    def test_threshold_is_configurable(self):
        token = "gH1gH1gH1gH1gH1kM2kM2"  # mixed classes but repetitive: 2.4 bits per character
        assert found(f"use {token} here", entropy_threshold=2.0) == [(token, "SECRET")]
        assert found(f"use {token} here") == []


class TestPlaceholders:
    def test_same_value_same_placeholder_across_calls(self):
        r = PIIRedactor()
        a = r.redact("Mail bob@example.com and alice@example.com.")
        b = r.redact("Again bob@example.com, then carol@example.com, then bob@example.com.")
        assert a.text == "Mail <EMAIL_1> and <EMAIL_2>."
        assert b.text == "Again <EMAIL_1>, then <EMAIL_3>, then <EMAIL_1>."
        assert b.counts == {"EMAIL": 3}

    def test_numbering_is_per_kind(self):
        res = PIIRedactor().redact("bob@example.com 555-123-4567 10.0.0.1 alice@example.com 10.0.0.2")
        assert res.text == "<EMAIL_1> <PHONE_1> <IP_1> <EMAIL_2> <IP_2>"
        assert res.counts == {"EMAIL": 2, "PHONE": 1, "IP": 2}

    def test_redact_many_shares_the_session_and_reset_starts_a_new_one(self):
        r = PIIRedactor()
        out = r.redact_many(["x bob@example.com", "y bob@example.com z alice@example.com"])
        assert [o.text for o in out] == ["x <EMAIL_1>", "y <EMAIL_1> z <EMAIL_2>"]
        r.reset()
        assert r.redact("alice@example.com").text == "<EMAIL_1>"

    def test_spans_point_into_the_original_and_hold_no_value(self):
        text = "Call 555-123-4567 or mail bob@example.com."
        res = PIIRedactor().redact(text)
        assert isinstance(res, RedactionResult)
        assert [(s.start, s.end, s.kind, s.placeholder) for s in res.spans] == [
            (5, 17, "PHONE", "<PHONE_1>"), (26, 41, "EMAIL", "<EMAIL_1>")]
        dumped = json.dumps(res.to_dict())
        assert "555-123-4567" not in dumped.replace(res.text, "") and "bob@example.com" not in dumped
        with pytest.raises(AttributeError):
            res.text = "changed"  # frozen

    def test_every_other_occurrence_of_a_found_value_is_masked(self):
        # the second "555-123-4567" is glued to a digit, so its context alone would not fire
        text = "Call 555-123-4567 or ext id9555-123-4567."
        res = PIIRedactor().redact(text)
        assert "555-123-4567" not in res.text
        assert res.text == "Call <PHONE_1> or ext id9<PHONE_1>."

    def test_lookalikes_in_the_input_are_reserved(self):
        r = PIIRedactor(keep_mapping=True)
        text = "Template says <EMAIL_1> and <PHONE_2>; real: bob@example.com, 555-123-4567, 555-987-6543."
        res = r.redact(text)
        assert res.text == ("Template says <EMAIL_1> and <PHONE_2>; real: <EMAIL_2>, <PHONE_1>, <PHONE_3>.")
        assert r.restore(res.text) == text  # the lookalikes are left alone by restore too

    def test_redacting_redacted_text_changes_nothing(self):
        r = PIIRedactor()
        first = r.redact("password=hunter2 secret: 'abc def' bob@example.com 4111 1111 1111 1111").text
        assert r.redact(first).text == first
        assert PIIRedactor().redact(first).text == first  # in a fresh session too

    def test_no_nested_or_broken_placeholders(self):
        text = ("Contact <bob@example.com> at +1 (555) 123-4567, card 4111-1111-1111-1111, "
                "key sk-proj-AbCdEf1234567890GhIjKlMnOp")
        out = PIIRedactor().redact(text).text
        assert out.count("<") - 1 == len(PLACEHOLDER.findall(out))  # the one "<" of "<bob" stays
        assert PLACEHOLDER.sub("", out).count("_") == 0


class TestRestore:
    def test_round_trip(self):
        r = PIIRedactor(keep_mapping=True)
        texts = ["Mail bob@example.com or call +44 20 7946 0958.", "IBAN DE89 3704 0044 0532 0130 00, bob@example.com",
                 "key AKIAIOSFODNN7EXAMPLE and password=hunter2 from 10.0.0.1"]
        redacted = [res.text for res in r.redact_many(texts)]
        assert [r.restore(t) for t in redacted] == texts
        answer = "I wrote to <EMAIL_1> about <IBAN_1>; <EMAIL_9> is unknown."
        assert r.restore(answer) == ("I wrote to bob@example.com about DE89 3704 0044 0532 0130 00; "
                                     "<EMAIL_9> is unknown.")

    def test_unavailable_without_keep_mapping(self):
        r = PIIRedactor()
        r.redact("bob@example.com")
        with pytest.raises(RestoreUnavailableError, match="keep_mapping=True"):
            r.restore("<EMAIL_1>")
        assert issubclass(RestoreUnavailableError, RuntimeError)

    def test_reset_forgets_the_mapping(self):
        r = PIIRedactor(keep_mapping=True)
        r.redact("bob@example.com")
        r.reset()
        assert r.restore("<EMAIL_1>") == "<EMAIL_1>"

    def test_mapping_never_leaves_memory(self):
        r = PIIRedactor(keep_mapping=True)
        res = r.redact("bob@example.com password=hunter2")
        leaked = [json.dumps(r.to_dict()), r.report().model_dump_json(), repr(r), repr(res),
                  json.dumps(res.to_dict())]
        assert not any("bob@example.com" in x or "hunter2" in x for x in leaked)
        with pytest.raises(TypeError, match="not pickled"):
            pickle.dumps(r)
        with pytest.raises(TypeError):
            copy.deepcopy(r)


class TestConfigAndReport:
    def test_to_dict_round_trip(self):
        r = PIIRedactor(kinds=["email", "IP"], entropy_threshold=3.0, keep_mapping=True, phone_regions=["se", "PL"])
        data = r.to_dict()
        assert data == {"type": "PIIRedactor", "kinds": ["EMAIL", "IP"], "entropy_threshold": 3.0, "keep_mapping": True,
                        "phone_regions": ["SE", "PL"]}
        again = PIIRedactor.from_dict(json.loads(json.dumps(data)))
        assert again.to_dict() == data

    def test_kinds_select_detectors(self):
        text = "bob@example.com 555-123-4567 10.0.0.1"
        assert PIIRedactor(kinds=["EMAIL"]).redact(text).text == "<EMAIL_1> 555-123-4567 10.0.0.1"
        assert PIIRedactor().kinds == KINDS

    @pytest.mark.parametrize("bad", [{"kinds": ["EMAIL", "SSN"]}, {"kinds": []}, {"entropy_threshold": -1},
                                     {"unknown": 1}])
    def test_bad_config(self, bad):
        with pytest.raises(ValueError):
            PIIRedactor.from_dict(bad)

    def test_report(self):
        r = PIIRedactor()
        r.redact_many(["bob@example.com and alice@example.com", "bob@example.com, 10.0.0.1", "nothing here"])
        rep = r.report()
        assert isinstance(rep, CompressionReport)
        assert rep.compressor == "pii_redactor"
        assert rep.removed == {"EMAIL": 3, "IP": 1}
        assert rep.items_in == rep.items_out == 3
        assert rep.details["distinct_values"] == {"EMAIL": 2, "IP": 1}
        assert rep.details["chars_in"] > rep.details["chars_out"] > 0
        assert rep.seconds > 0


    def test_each_result_carries_its_report(self):
        r = PIIRedactor()
        res = r.redact("mail bob@example.com or 10.0.0.1, then bob@example.com")
        rep = res.report
        assert isinstance(rep, CompressionReport) and rep.compressor == r.report().compressor
        assert rep.removed == res.counts == {"EMAIL": 2, "IP": 1}
        assert rep.items_in == rep.items_out == 1 and rep.details["chars_out"] == len(res.text)
        assert rep.details["chars_in"] > rep.details["chars_out"] and rep.seconds >= 0
        assert "bob@" not in rep.model_dump_json()
        assert res == PIIRedactor().redact("mail bob@example.com or 10.0.0.1, then bob@example.com")


class TestProperties:
    PII = ["bob@example.com", "555-123-4567", "+44 20 7946 0958", "4111 1111 1111 1111", "DE89370400440532013000",
           "10.0.0.1", "fe80::1", "AKIAIOSFODNN7EXAMPLE", "password=hunter2", "a8Fk2LmQ9xZ3pR7tY1wBc4Vn",
           "<EMAIL_1>", "<SECRET_2>", "-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----", "'", '"', "=",
           ":", "@", "+", "-", ".", "0", "7", "<", ">", "_", "/", " ", "\n"]
    MIXED = st.one_of(
        st.text(max_size=300),
        st.lists(st.one_of(st.sampled_from(PII), st.text(alphabet="ab1@.-_:=<> 9", max_size=6)),
                 max_size=40).map("".join),
    )

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(MIXED)
    def test_never_raises_and_reported_values_never_survive(self, text):
        r = PIIRedactor()
        res = r.redact(text)
        prev_end = 0
        rebuilt = []
        for s in res.spans:
            assert prev_end <= s.start < s.end <= len(text)  # sorted, disjoint, in bounds
            rebuilt += [text[prev_end:s.start], s.placeholder]
            prev_end = s.end
        assert "".join(rebuilt) + text[prev_end:] == res.text
        for s in res.spans:
            assert text[s.start:s.end] not in res.text

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(MIXED)
    def test_restore_round_trips_in_a_fresh_session(self, text):
        r = PIIRedactor(keep_mapping=True)
        assert r.restore(r.redact(text).text) == text

    WORDS = st.sampled_from(
        "the a of and to in is was king queen password secret token key api bearer credentials pass secretary "
        "internationalization counterrevolutionaries electroencephalography incomprehensibilities thou hast "
        "wherefore art romeo methoxytryptamine cyclooxygenase hydroxymethylglutaryl".split())
    SEPARATORS = st.sampled_from([" ", " ", ", ", ". ", "; ", ": ", "\n", "-", " - ", "! ", "? ", "/", "_"])

    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.tuples(WORDS, SEPARATORS), max_size=60))
    @example([("password", " "), ("is", "/"), ("password", " ")])  # "is/password": no label (a fresh-clone CI found it)
    def test_lowercase_words_are_unchanged(self, pairs):
        text = "".join(w + sep for w, sep in pairs)
        # "password: the_the_the" labels a value: masking it is right (hypothesis found it)
        assume(not re.search(r"\b(?:password|pass|secret|token|key|bearer|credentials)\s*[:=]\s*\w+_", text))
        assert PIIRedactor().redact(text).text == text


class TestSpeed:
    def test_one_megabyte_of_english_well_under_a_second(self, shared_data):
        text = (shared_data / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:1_000_000]
        r = PIIRedactor()
        r.redact(text[:1000])  # warm up
        best = min(_timed(r.redact, text) for _ in range(2))
        assert best < 0.5, f"{best:.3f} s for 1 MB"


def _timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0
