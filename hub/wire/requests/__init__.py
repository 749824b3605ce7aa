"""The requests the hub answers besides hello and events: a sidecar's blob,
child run, state and sleep requests, the producers' mail batches (the NATS mail
ingress), the loop that serves each subscription, and the blob collector."""

from .blobs import GC_INTERVAL as GC_INTERVAL
from .blobs import BlobCollector as BlobCollector
from .blobs import BlobHandler as BlobHandler
from .ingress import IngressConfig as IngressConfig
from .ingress import run_ingress as run_ingress
from .mint import MintHandler as MintHandler
from .serving import Handler as Handler
from .serving import serve as serve
from .sleep import SleepHandler as SleepHandler
from .state import StateHandler as StateHandler

__all__ = [
    "GC_INTERVAL",
    "BlobCollector",
    "BlobHandler",
    "Handler",
    "IngressConfig",
    "MintHandler",
    "SleepHandler",
    "StateHandler",
    "run_ingress",
    "serve",
]
