"""The spans of a mail's trace, as hub and sidecar make them: loaded only
when tracing is on (it imports opentelemetry), called from one-line hooks.

One trace per mail: its arrival (``POST /mail``, SMTP, the NATS ingress) ->
``mailrun.accept`` -> the hub's ``send mail.inbound.<dep>`` -> the sidecar's
``process mail.inbound.<dep>`` -> ``mailrun.handler`` (its
``mailrun.step``, ``mailrun.send`` and ``mailrun.spawn`` children) -> the
hub's ``process hub.events`` and, for a sent mail leaving, ``mailrun.relay``.
A context crosses processes as a W3C ``traceparent``/``tracestate`` carrier
in the frames' and events' ``trace`` field; inside a process it waits in a
bounded :class:`~runtime.tracing.Kept` (docs/tracing.md). A trace the
sampler did not take at its root goes its way as its ``traceparent`` alone
(``_quiet``), decided before any span where the provider is one
:func:`provider` made (``_head``): a few µs a mail. The SDK's set-up and the
default sampler are ``_sdk``, the carriers and kept contexts ``_context``, the hub's spans
``_hub`` and the sidecar's ``_sidecar``.
"""

from ._context import DEPLOYMENT as DEPLOYMENT
from ._context import DISPATCH as DISPATCH
from ._context import KIND as KIND
from ._context import RUN as RUN
from ._context import Carrier as Carrier
from ._context import Item as Item
from ._context import carrier as carrier
from ._context import children as children
from ._context import context_of as context_of
from ._context import current as current
from ._context import dispatches as dispatches
from ._context import outgoing as outgoing
from ._head import provider as provider
from ._hub import accepting as accepting
from ._hub import http_server as http_server
from ._hub import ingesting as ingesting
from ._hub import keep_accepted as keep_accepted
from ._hub import keep_child as keep_child
from ._hub import keep_sent as keep_sent
from ._hub import nats_ingress as nats_ingress
from ._hub import relaying as relaying
from ._hub import sending as sending
from ._hub import smtp_ingress as smtp_ingress
from ._sdk import DEFAULT_RATIO as DEFAULT_RATIO
from ._sdk import default_sampler as default_sampler
from ._sdk import provider_from_env as provider_from_env
from ._sdk import service_name as service_name
from ._sdk import stop as stop
from ._sdk import use as use
from ._sidecar import handling as handling
from ._sidecar import receiving as receiving
from ._sidecar import sent as sent
from ._sidecar import spawned as spawned
from ._sidecar import step as step

__all__ = [
    "DEFAULT_RATIO",
    "DEPLOYMENT",
    "DISPATCH",
    "KIND",
    "RUN",
    "Carrier",
    "Item",
    "accepting",
    "carrier",
    "children",
    "context_of",
    "current",
    "default_sampler",
    "dispatches",
    "handling",
    "http_server",
    "ingesting",
    "keep_accepted",
    "keep_child",
    "keep_sent",
    "nats_ingress",
    "outgoing",
    "provider",
    "provider_from_env",
    "receiving",
    "relaying",
    "sending",
    "sent",
    "service_name",
    "smtp_ingress",
    "spawned",
    "step",
    "stop",
    "use",
]
