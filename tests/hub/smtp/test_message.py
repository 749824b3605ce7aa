"""A message as SMTP brings it -> the trigger's fields (hub/smtp/_message.py)."""

from __future__ import annotations

from email.message import EmailMessage
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

from hub.smtp import parse_message


def test_a_plain_message_gives_sender_subject_id_and_text() -> None:
    raw = (
        b"From: Alice Example <alice@example.com>\r\n"
        b"To: orders@mailrun.local\r\n"
        b"Subject: order 7\r\n"
        b"Message-ID: <m1@example.com>\r\n"
        b"\r\n"
        b"two\r\nlines\r\n"
    )
    parsed = parse_message(raw, "bounce@example.com")
    assert parsed.sender == "alice@example.com"  # the header's address, not MAIL FROM
    assert parsed.subject == "order 7"
    assert parsed.message_id == "<m1@example.com>"
    assert parsed.text == "two\nlines\n"


def test_without_from_header_the_envelope_sender_is_the_sender() -> None:
    parsed = parse_message(b"Subject: s\r\n\r\nx\r\n", "env@example.com")
    assert parsed.sender == "env@example.com"
    assert parsed.message_id is None  # no Message-ID: no message id


def test_the_null_sender_of_a_bounce_is_no_sender() -> None:
    assert parse_message(b"Subject: s\r\n\r\nx\r\n", "<>").sender is None


def test_a_malformed_from_falls_back_to_the_envelope_sender() -> None:
    parsed = parse_message(b"From: not an address <<\r\nSubject: s\r\n\r\nx", "env@example.com")
    assert parsed.sender == "env@example.com"


def test_encoded_words_are_decoded_and_folded_headers_unfolded() -> None:
    raw = (
        b"From: =?utf-8?q?J=C3=B6rg?= <jorg@example.com>\r\n"
        b"Subject: =?utf-8?b?R3LDvMOfZQ==?=\r\n and =?iso-8859-1?q?caf=E9?=\r\n"
        b"Message-ID:\r\n <folded@example.com>\r\n"
        b"\r\n"
        b"x\r\n"
    )
    parsed = parse_message(raw)
    assert parsed.subject == "Grüße and café"
    assert parsed.message_id == "<folded@example.com>"
    assert "\n" not in parsed.subject and "\r" not in parsed.subject


def test_raw_utf8_headers_and_an_unknown_charset_do_not_break_parsing() -> None:
    raw = (
        "Subject: réunion\r\nContent-Type: text/plain; charset=no-such-charset\r\n\r\nçà\r\n"
    ).encode()
    parsed = parse_message(raw)
    assert parsed.subject == "réunion"
    assert parsed.text == "çà\n"  # read as UTF-8


def test_undecodable_header_bytes_become_replacement_characters() -> None:
    parsed = parse_message(b"Subject: caf\xe9\r\n\r\n")
    assert parsed.subject.startswith("caf")
    parsed.subject.encode("utf-8")  # valid text: no lone surrogates left


def test_multipart_takes_the_first_text_plain_part_decoded_from_base64() -> None:
    message = MIMEMultipart("mixed")
    message["Subject"] = "=?utf-8?b?w5xiZXJzaWNodA==?="
    message["From"] = "sender@example.com"
    alternative = MIMEMultipart("alternative")
    alternative.attach(MIMEText("<p>html</p>", "html", "utf-8"))
    alternative.attach(MIMEText("Grüße aus Köln\nzweite Zeile", "plain", "utf-8"))  # base64
    message.attach(alternative)
    message.attach(MIMEApplication(b"\x00\x01", Name="data.bin"))
    raw = message.as_bytes()
    assert b"base64" in raw and "Grüße".encode() not in raw
    parsed = parse_message(raw)
    assert parsed.subject == "Übersicht"
    assert parsed.text == "Grüße aus Köln\nzweite Zeile"


def test_a_text_attachment_is_not_the_body() -> None:
    message = EmailMessage()
    message["Subject"] = "s"
    message.set_content("the body")
    message.add_attachment("an attached file", filename="notes.txt")
    assert parse_message(message.as_bytes()).text == "the body\n"


def test_without_text_plain_the_html_part_is_the_text() -> None:
    message = EmailMessage()
    message.set_content("<p>caf\u00e9</p>", subtype="html", cte="quoted-printable")
    assert parse_message(message.as_bytes()).text == "<p>café</p>\n"


def test_a_message_without_any_text_part_has_empty_text() -> None:
    message = EmailMessage()
    message.set_content(b"\x89PNG", maintype="image", subtype="png")
    parsed = parse_message(message.as_bytes())
    assert parsed.text == ""


def test_garbage_never_raises() -> None:
    for raw in (b"", b"\x00\xff\r\n\r\n", b"Content-Type: multipart/mixed\r\n\r\n--", b":::"):
        parsed = parse_message(raw)
        assert isinstance(parsed.text, str)


def test_in_reply_to_and_references_give_the_message_ids_they_name() -> None:
    raw = (
        b"Subject: Re: order 7\r\n"
        b"In-Reply-To: <q@mailrun.local> (the question)\r\n"
        b"References: <p@example.com>\r\n <q@mailrun.local>\r\n"
        b"\r\nyes\r\n"
    )
    parsed = parse_message(raw)
    assert parsed.in_reply_to == "<q@mailrun.local>"
    assert parsed.references == ("<p@example.com>", "<q@mailrun.local>")
    plain = parse_message(b"Subject: s\r\nReferences: garbage here\r\n\r\nx")
    assert (plain.in_reply_to, plain.references) == (None, ())
