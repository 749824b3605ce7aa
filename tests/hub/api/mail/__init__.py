"""Mail over HTTP (hub/api/routes/triggers, producers): batches, routing, the protocol lane,
producers.
"""
