"""hub.mailbox: addresses taken apart, threads read from their headers, and
the signed reply tokens (their shape, and what makes one fail)."""

from __future__ import annotations

import pytest

from hub.mailbox import (
    is_reply_token,
    mail_context,
    message_ids,
    parse_address,
    reply_address,
    reply_candidates,
    thread_of,
    verify_token,
)
from runtime.wire import MailContext

ROW = "out_" + "ab" * 13
KEY = b"k" * 32


def test_an_address_is_its_base_its_tag_as_written_and_its_domain() -> None:
    got = parse_address(" Sales+EU+q3@Example.ORG ")
    assert (got.base, got.tag, got.domain, got.written) == (
        "sales@example.org",
        "EU+q3",
        "example.org",
        "Sales+EU+q3@Example.ORG",
    )
    assert parse_address("sales+@x.org").tag == ""
    assert parse_address("sales@x.org").tag is None


@pytest.mark.parametrize(
    ("header", "ids"),
    [
        ("<a@x> <b@x>", ["<a@x>", "<b@x>"]),
        ("<a@x>\r\n <b@x>", ["<a@x>", "<b@x>"]),
        ("(comment) <a@x>", ["<a@x>"]),
        ("a@x", ["<a@x>"]),
        ("a x", []),
        ("", []),
        ("<" + "x" * 997 + ">", []),
    ],
)
def test_message_ids_of_a_header(header: str, ids: list[str]) -> None:
    assert message_ids(header) == ids


def test_the_thread_is_references_then_in_reply_to_each_once_oldest_first() -> None:
    assert thread_of("<c@x>", ["<a@x> <b@x>", "<b@x>"]) == ["<a@x>", "<b@x>", "<c@x>"]
    assert thread_of("<b@x>", ["<a@x> <b@x>"]) == ["<a@x>", "<b@x>"]
    many = [f"<{n}@x>" for n in range(150)]
    assert thread_of(None, many) == many[-100:]
    # Looked for under In-Reply-To first, then References from the newest back.
    context = MailContext(in_reply_to="<a@x>", thread=["<a@x>", "<b@x>", "<c@x>"])
    assert reply_candidates(context) == ["<a@x>", "<c@x>", "<b@x>"]


def test_a_mail_context_names_the_recipient_as_written() -> None:
    address, context = mail_context("Orders+VIP@mailrun.local", "<q@x>", ["<p@x>"])
    assert address.base == "orders@mailrun.local"
    assert context == MailContext(
        to="Orders+VIP@mailrun.local", tag="VIP", in_reply_to="<q@x>", thread=["<p@x>", "<q@x>"]
    )


def test_a_reply_token_verifies_for_its_address_and_key_only() -> None:
    address = reply_address(KEY, "orders@mailrun.local", ROW)
    tag = address.partition("+")[2].partition("@")[0]
    assert is_reply_token(tag) and len(tag) == 45
    assert verify_token(KEY, "orders@mailrun.local", tag) == ROW
    assert verify_token(KEY, "Orders@mailrun.local", tag.upper()) == ROW  # case-blind
    assert verify_token(b"other" * 8, "orders@mailrun.local", tag) is None
    assert verify_token(KEY, "audit@mailrun.local", tag) is None
    other_row = tag[:2] + ("0" if tag[2] != "0" else "1") + tag[3:]
    assert verify_token(KEY, "orders@mailrun.local", other_row) is None
    assert verify_token(KEY, "orders@mailrun.local", "vip") is None
