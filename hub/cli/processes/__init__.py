"""The commands that run mailrun's processes: ``hub`` (alone, in this
process), ``up`` (everything, supervised), ``demo`` (``up`` once, in a
temporary dir) and ``sidecar`` (one deployment's, by hand); and
``dkim-record``, the DNS record of the hub's DKIM key."""

from .dkim import dkim_record as dkim_record
from .hub import hub_cmd as hub_cmd
from .sidecar import sidecar_cmd as sidecar_cmd
from .up import demo_cmd as demo_cmd
from .up import up_cmd as up_cmd

__all__ = ["demo_cmd", "dkim_record", "hub_cmd", "sidecar_cmd", "up_cmd"]
