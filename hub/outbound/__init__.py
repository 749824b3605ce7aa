"""Mail that leaves: the outbox of mail runs send to outside addresses, the
loop that hands it to an SMTP relay (``--smtp-relay``), the message each
row becomes, and its DKIM signature (``--dkim-key``, ``mailrun dkim-record``).

The DKIM names are imported the first time they are read: dkimpy with
dnspython, and ``cryptography`` for the key files, cost a hub about a tenth
of a second at start, and a hub without ``--dkim-key`` never signs
(docs/performance.md, "A `mailrun` process's start").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.lazy import lazy_names

from ._config import CA_FILE_ENV as CA_FILE_ENV
from ._config import PASSWORD_ENV as PASSWORD_ENV
from ._config import STARTTLS_ENV as STARTTLS_ENV
from ._config import USER_ENV as USER_ENV
from ._config import RelayConfig as RelayConfig
from ._config import relay_config as relay_config
from ._message import Built as Built
from ._message import build_message as build_message
from ._relay import Outbox as Outbox

if TYPE_CHECKING:
    from ._dkim import SIGNED_HEADERS as SIGNED_HEADERS
    from ._dkim import DkimKey as DkimKey
    from ._dkim import DkimSigner as DkimSigner
    from ._dkim import dkim_keys as dkim_keys
    from ._dkim import dkim_signer as dkim_signer
    from ._dkim_keys import dns_record as dns_record
    from ._dkim_keys import generate_key as generate_key
    from ._dkim_keys import read_key as read_key

# Each lazy name and the module it comes from; the TYPE_CHECKING imports above
# say the same to mypy (tests/hub/test_lazy_packages.py holds the two together).
_LAZY = {
    "DkimKey": "._dkim",
    "DkimSigner": "._dkim",
    "SIGNED_HEADERS": "._dkim",
    "dkim_keys": "._dkim",
    "dkim_signer": "._dkim",
    "dns_record": "._dkim_keys",
    "generate_key": "._dkim_keys",
    "read_key": "._dkim_keys",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__all__ = [
    "CA_FILE_ENV",
    "PASSWORD_ENV",
    "SIGNED_HEADERS",
    "STARTTLS_ENV",
    "USER_ENV",
    "Built",
    "DkimKey",
    "DkimSigner",
    "Outbox",
    "RelayConfig",
    "build_message",
    "dkim_keys",
    "dkim_signer",
    "dns_record",
    "generate_key",
    "read_key",
    "relay_config",
]
