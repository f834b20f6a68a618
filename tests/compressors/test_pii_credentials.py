"""SECRET (issue 20): passwords in connection URLs of every common scheme and in prose, and token
formats common in logs (Twilio, Mailgun, Telegram, webhooks, ...)."""

from __future__ import annotations

import pytest

from contextkit.compressors.redact import PIIRedactor


def secrets(text: str) -> list[str]:
    return [text[s.start:s.end] for s in PIIRedactor().redact(text).spans if s.kind == "SECRET"]


class TestConnectionUrls:
    @pytest.mark.parametrize("scheme", ["postgres", "postgresql", "mysql", "mariadb", "mongodb", "mongodb+srv",
                                        "redis", "rediss", "amqp", "amqps", "ftp", "sftp", "smtp", "http", "https",
                                        "jdbc:mysql", "jdbc:postgresql", "ssh", "ldap"])
    def test_the_password_is_masked_and_the_host_kept(self, scheme):
        text = f"Connect with {scheme}://svc:hunter2pass@db.example.com:5432/app today."
        res = PIIRedactor().redact(text)
        assert secrets(text) == ["hunter2pass"] and "db.example.com:5432/app" in res.text
        assert all(s.kind != "EMAIL" for s in res.spans)

    @pytest.mark.parametrize("text,value", [
        ("redis://:p4ssw0rd@cache:6379/0", "p4ssw0rd"),
        ("mysql://root:b4v%Nz(elr@0@10.0.0.5/db", "b4v%Nz(elr@0"),  # an "@" in the password: the last one ends it
        ("jdbc:oracle:thin:scott/tiger@dbhost:1521:orcl", "tiger"),
    ])
    def test_odd_userinfo(self, text, value):
        assert secrets(text) == [value]

    @pytest.mark.parametrize("text", ["postgresql://user:<password>@host/db", "https://example.com/a:b@c",
                                      "ftp://anna@files.example.org/pub"])
    def test_stand_ins_and_urls_without_a_password(self, text):
        assert secrets(text) == []


class TestPasswordsInProse:
    @pytest.mark.parametrize("text,value", [
        ("my password is hunter2, ok?", "hunter2"),
        ("The wifi passphrase is correct-horse-battery-staple.", "correct-horse-battery-staple"),
        ("the secret is 's3cr3t sauce'", "s3cr3t sauce"),
        ("use the passphrase \"blue moon rising\" to get in", "blue moon rising"),
        ("my password for the VPN is Qx7!ttr9 now", "Qx7!ttr9"),
        ("Das Passwort ist Sommer2024!", "Sommer2024!"),
        ("PIN is 4821.", "4821"),
        ("pwd=Tr0ub4dor&3", "Tr0ub4dor&3"),
    ])
    def test_values(self, text, value):
        assert secrets(text) == [value]

    @pytest.mark.parametrize("text", ["the password is wrong", "The secret is out.", "password: forgotten again",
                                      "Password reset link sent", "the password is 12 characters long",
                                      "pass: the! ", "O, pass'd and now repass'd the sea", "password=user.password"])
    def test_prose_that_is_not_a_password(self, text):
        assert secrets(text) == []


class TestTokenFormats:
    @pytest.mark.parametrize("value", [
        "AC" + "0123456789abcdef" * 2, "SK" + "fedcba9876543210" * 2,  # Twilio account SID, API key
        "key-" + "0123456789abcdefABCDEF0123456789", "shpat_" + "0123456789abcdef" * 2,
        "dop_v1_" + "0123456789abcdef" * 4, "dapi" + "0123456789abcdef" * 2,
        "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0", "0123456789abcdef0123456789abcdef-us14",
        "ya29.a0AfH6SMBx3kq9Lr7tT5vYw2Zp8QnC1dE4fG6hJ",
    ])
    def test_named_formats(self, value):
        assert secrets(f"log: token {value} seen") == [value]

    def test_webhook_urls(self):
        text = "POST https://hooks.slack.com/services/T00000000/B11111111/abcdefghijklmnopqrstuvwx"
        assert secrets(text) == ["T00000000/B11111111/abcdefghijklmnopqrstuvwx"]

    @pytest.mark.parametrize("text", ["ACCOUNTING department", "skeleton key-holder", "commit 0123456789abcdef01234567"])
    def test_lookalikes(self, text):
        assert secrets(text) == []
