"""Run events at the hub (hub/wire/events): ingestion, acceptance, group commits, quarantine,
retention.
"""
