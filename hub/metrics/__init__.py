"""The hub's counters and histograms (``GET /metrics``, Prometheus text)."""

from ._families import LATENCY_BUCKETS as LATENCY_BUCKETS
from ._families import Counter as Counter
from ._families import Histogram as Histogram
from ._families import family as family
from ._families import label as label
from ._hub import HubMetrics as HubMetrics

__all__ = ["LATENCY_BUCKETS", "Counter", "Histogram", "HubMetrics", "family", "label"]
