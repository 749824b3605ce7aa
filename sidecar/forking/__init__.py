"""The fork server (``python -m sidecar.forking``): one process per
``mailrun up`` that imports the sidecar once and forks each sidecar ``up``
asks for, instead of a full interpreter start per sidecar
(docs/performance.md, "A sidecar's start"; docs/operations.md says how to
choose it).

Its frames are runtime's (``runtime.sidecar_contract``); its client is
``up``'s (hub/up/fleet/forking.py): the two never import each other.
"""

from ._server import serve as serve

__all__ = ["serve"]
