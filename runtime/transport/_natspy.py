"""nats-py, imported without its websocket transport.

nats-py imports aiohttp at import time whenever it is installed, only for
``ws://`` servers, which mailrun never uses: 0.2 s and about 10 MiB in every
hub, sidecar and CLI process on a machine that has aiohttp for something
else. While nats-py is imported, ``import aiohttp`` fails, so nats-py takes
its no-websocket path; afterwards aiohttp imports as usual. A process that
imported aiohttp before is left as it is.
"""

from __future__ import annotations

import sys

_hidden = "aiohttp" not in sys.modules
if _hidden:
    sys.modules["aiohttp"] = None  # type: ignore[assignment]
try:
    from nats import errors as errors
    from nats.aio.client import Client as Client
    from nats.aio.client import Server as Server
    from nats.aio.msg import Msg as Msg
    from nats.aio.subscription import Subscription as Subscription
finally:
    if _hidden:
        del sys.modules["aiohttp"]

__all__ = ["Client", "Msg", "Server", "Subscription", "errors"]
