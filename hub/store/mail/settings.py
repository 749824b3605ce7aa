"""A deployment's mail settings: whom it takes mail from, what a reply to
an ended run meets, and whether it takes its domain's unknown addresses.

Kept as JSON in ``deployment.mail_settings`` (NULL: every default), but
for ``catch_all``, a column of its own (``catch_all_domain``: the domain it
takes, or NULL) so that the store keeps one live catch-all per domain (a
unique index) and finds it by the domain.
"""

from __future__ import annotations

import msgspec

from ..sql import Tx, sql


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
