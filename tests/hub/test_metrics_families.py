"""hub.metrics: counters by label and latency histograms as Prometheus text."""

from __future__ import annotations

from hub.metrics import Counter, Histogram


def test_a_histogram_counts_cumulatively_and_keeps_the_sum() -> None:
    h = Histogram("x_seconds", "help", buckets=(0.01, 0.1, 1))
    for seconds in (0.005, 0.01, 0.05, 0.5, 3):
        h.observe(seconds)
    lines = h.render()
    assert lines[2:] == [
        'x_seconds_bucket{le="0.01"} 2',  # le: a bound counts as within
        'x_seconds_bucket{le="0.1"} 3',
        'x_seconds_bucket{le="1"} 4',
        'x_seconds_bucket{le="+Inf"} 5',
        "x_seconds_sum 3.565",
        "x_seconds_count 5",
    ]


def test_a_counter_by_label_escapes_values_and_forgets_one() -> None:
    c = Counter("y_total", "help", "deployment")
    c.inc("a")
    c.inc('b"\\', 2)
    c.forget("a")
    assert c.render()[2:] == ['y_total{deployment="b\\"\\\\"} 2']
    plain = Counter("z_total", "help")
    assert plain.render()[2:] == ["z_total 0"]
