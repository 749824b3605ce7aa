"""Mail that leaves: the outbox of mail runs send to outside addresses, and
the loop that hands it to an SMTP relay (``--smtp-relay``)."""

from ._config import CA_FILE_ENV as CA_FILE_ENV
from ._config import PASSWORD_ENV as PASSWORD_ENV
from ._config import STARTTLS_ENV as STARTTLS_ENV
from ._config import USER_ENV as USER_ENV
from ._config import RelayConfig as RelayConfig
from ._config import relay_config as relay_config
from ._relay import Outbox as Outbox

__all__ = [
    "CA_FILE_ENV",
    "PASSWORD_ENV",
    "STARTTLS_ENV",
    "USER_ENV",
    "Outbox",
    "RelayConfig",
    "relay_config",
]
