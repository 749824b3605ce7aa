"""nats-py, imported without its websocket transport.

nats-py imports aiohttp at import time whenever it is installed, only for
``ws://`` servers, which mailrun never uses: 0.2 s and about 10 MiB in every
hub, sidecar and CLI process on a machine that has aiohttp for something
else. It also asks ``importlib.metadata`` for its own version, only to name
it in its CONNECT (the server's ``connz`` shows it) and its ``repr``: that
package and its scan of ``sys.path`` are 4 % of the instructions of a
sidecar's imports, paid on every wake of an asleep deployment
(docs/performance.md, "A sidecar's start"). While nats-py is imported both
imports fail, so nats-py takes its no-websocket path and calls itself
version ``0.0.0``; afterwards both import as usual. A process that imported
either before is left as it is for that one.
"""

from __future__ import annotations

import sys

_HIDDEN = [name for name in ("aiohttp", "importlib.metadata") if name not in sys.modules]
for _name in _HIDDEN:
    sys.modules[_name] = None  # type: ignore[assignment]
try:
    from nats import errors as errors
    from nats.aio.client import Client as Client
    from nats.aio.client import Server as Server
    from nats.aio.msg import Msg as Msg
    from nats.aio.subscription import Subscription as Subscription
finally:
    for _name in _HIDDEN:
        del sys.modules[_name]

__all__ = ["Client", "Msg", "Server", "Subscription", "errors"]
