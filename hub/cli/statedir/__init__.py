"""Commands on a hub's state dir with no hub running: ``migrate`` (what an
upgrade changes, ``upgrade``) and ``nats-config`` (the authorization an
external NATS server needs, ``natsconfig``)."""

from .commands import migrate as migrate
from .commands import nats_config_cmd as nats_config_cmd

__all__ = ["migrate", "nats_config_cmd"]
