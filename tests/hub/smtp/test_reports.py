"""Delivery status notifications as the SMTP ingress reads them
(``hub.smtp.read_report``): the failed recipients of RFC 3464 reports in
the shapes relays write, and nothing from what is no report."""

from __future__ import annotations

from hub.smtp import read_report
from tests.support.servers.smtp import delivery_report

GONE = "gone@example.org"


def test_a_failed_recipient_with_its_status_diagnostic_and_the_original_id() -> None:
    report = read_report(delivery_report("bounces+x@mailrun.local", "<m1@mailrun.local>", GONE))
    assert report is not None
    (failure,) = report.failures
    assert (failure.recipient, failure.status) == (GONE, "5.1.1")
    assert failure.diagnostic == f"550 5.1.1 <{GONE}>: mailbox unknown"
    assert (report.message_id, report.others) == ("<m1@mailrun.local>", [])


def test_other_actions_are_no_failure() -> None:
    raw = delivery_report("b@x", "<m1@x>", GONE, action="delayed", status="4.4.1")
    report = read_report(raw)
    assert report is not None
    assert (report.failures, report.others) == ([], [f"delayed for {GONE}"])


def test_global_reports_a_returned_message_and_missing_fields() -> None:
    raw = (
        delivery_report("b@x", "<m2@x>", GONE)
        .replace(b"message/delivery-status", b"message/global-delivery-status")
        .replace(b"text/rfc822-headers", b"message/rfc822")
        .replace(b"Final-Recipient", b"Original-Recipient")
        .replace(b"Status: 5.1.1\r\n", b"")
    )
    report = read_report(raw)
    assert report is not None
    (failure,) = report.failures
    assert (failure.recipient, failure.status) == (GONE, "5.0.0")
    assert report.message_id == "<m2@x>"


def test_what_is_no_delivery_report_is_none() -> None:
    assert read_report(b"Subject: out of office\r\n\r\nback monday\r\n") is None
    other = delivery_report("b@x", "<m@x>", GONE).replace(
        b"delivery-status;", b"disposition-notification;"
    )
    assert read_report(other) is None
    assert read_report(b"\x00\xff\r\n\r\n") is None
