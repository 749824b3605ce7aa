"""A deployment's mail settings: whom it takes mail from, what a reply to
an ended run meets, and whether it takes its domain's unknown addresses.

Kept as JSON in ``deployment.mail_settings`` (NULL: every default), but
for ``catch_all``, a column of its own (``catch_all_domain``: the domain it
takes, or NULL) so that the store keeps one live catch-all per domain (a
unique index) and finds it by the domain.

A change (:class:`MailChange`, the ``mail`` of a create or a ``PATCH``) is
checked whole before anything is written (422 ``invalid_mail_settings``);
patterns are kept lower-cased, each once, in the order given.
"""

from __future__ import annotations

import re
from functools import lru_cache

import msgspec

from runtime.wire import REPLIES_TO_ENDED

from ..._errors import InvalidMailSettings
from ...mailbox import parse_address
from ..sql import Tx, sql

MAX_PATTERNS = 100
"""Patterns in each of ``allow_from`` and ``deny_from``."""
MAX_PATTERN = 254  # an address's own limit (RFC 5321 4.5.3.1.3)
_PATTERN = re.compile(r"[^\s@,<>\"]+@[^\s@,<>\"]+")


class MailSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``allow_from`` / ``deny_from``: sender patterns (``*@example.com``,
    ``boss@example.com``, ``*@*.example.com``; ``*`` any run of characters,
    compared lower-cased). A sender matching a ``deny_from`` pattern is
    refused; with ``allow_from`` set, so is one matching none of them.
    ``require_dmarc``: SMTP mail is taken only with a DMARC ``pass``.
    ``replies_to_ended``: ``top_level`` or ``refuse`` (runtime.wire.REPLIES_TO_ENDED).
    ``catch_all``: mirrors the deployment's column (shown, and set, with the rest)."""

    allow_from: tuple[str, ...] = ()
    deny_from: tuple[str, ...] = ()
    require_dmarc: bool = False
    replies_to_ended: str = "top_level"
    catch_all: bool = False


class MailChange(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """Some of a deployment's mail settings (None: the one in force stays);
    a list given replaces the one in force (``[]`` clears it)."""

    allow_from: list[str] | None = None
    deny_from: list[str] | None = None
    require_dmarc: bool | None = None
    replies_to_ended: str | None = None
    catch_all: bool | None = None


DEFAULT_SETTINGS = MailSettings()

_READ = sql("SELECT mail_settings, catch_all_domain FROM deployment WHERE id = ?")


def decode_settings(text: str | None, catch_all_domain: str | None = None) -> MailSettings:
    """The settings a row holds (NULL: the defaults)."""
    base = DEFAULT_SETTINGS if not text else msgspec.json.decode(text, type=MailSettings)
    return msgspec.structs.replace(base, catch_all=catch_all_domain is not None)


def encode_settings(settings: MailSettings) -> str | None:
    """The column's value: NULL for the defaults, so an untouched row stays as it was."""
    stored = msgspec.structs.replace(settings, catch_all=False)
    return None if stored == DEFAULT_SETTINGS else msgspec.json.encode(stored).decode()


def mail_settings(tx: Tx, deployment_id: str) -> MailSettings:
    """The settings of ``deployment_id`` (the defaults for an unknown one)."""
    row = tx.fetch_one(_READ, (deployment_id,))
    if row is None:
        return DEFAULT_SETTINGS
    return decode_settings(row[0], row[1])


def _patterns(name: str, given: list[str]) -> tuple[str, ...]:
    if len(given) > MAX_PATTERNS:
        raise InvalidMailSettings(f"'{name}' holds at most {MAX_PATTERNS} patterns")
    kept: dict[str, None] = {}
    for pattern in given:
        text = pattern.strip().lower()
        if len(text) > MAX_PATTERN or not _PATTERN.fullmatch(text):
            raise InvalidMailSettings(
                f"'{name}': {pattern[:80]!r} is not a sender pattern"
                " (like '*@example.com' or 'boss@example.com')"
            )
        kept[text] = None
    return tuple(kept)


def changed_settings(settings: MailSettings, change: MailChange) -> MailSettings:
    """``settings`` with ``change`` applied, checked whole; InvalidMailSettings
    naming the first setting that is wrong."""
    if change.replies_to_ended is not None and change.replies_to_ended not in REPLIES_TO_ENDED:
        raise InvalidMailSettings(
            f"'replies_to_ended' must be one of {', '.join(REPLIES_TO_ENDED)},"
            f" not {change.replies_to_ended[:40]!r}"
        )
    fields = {
        name: value
        for name in MailChange.__struct_fields__
        if (value := getattr(change, name)) is not None
    }
    for name in ("allow_from", "deny_from"):
        if name in fields:
            fields[name] = _patterns(name, fields[name])
    return msgspec.structs.replace(settings, **fields)


@lru_cache(maxsize=1024)
def _matcher(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def sender_refusal(settings: MailSettings, sender: str | None) -> str | None:
    """Why ``settings`` refuse mail from ``sender`` (None: they take it).

    The sender is compared by its base address (``name+tag@domain`` is
    ``name@domain``), lower-cased. ``deny_from`` wins; with ``allow_from``
    set, a sender matching none of it, or no sender at all, is refused."""
    if not settings.allow_from and not settings.deny_from:
        return None
    base = parse_address(sender).base if sender else ""
    if base and any(_matcher(p).fullmatch(base) for p in settings.deny_from):
        return f"the deployment does not take mail from {base!r}"
    if settings.allow_from and not any(_matcher(p).fullmatch(base) for p in settings.allow_from):
        who = repr(base) if base else "a mail with no sender"
        return f"the deployment takes mail only from its allow list, not from {who}"
    return None
