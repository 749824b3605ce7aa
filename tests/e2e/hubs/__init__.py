"""Hubs and restarts end to end: several hubs, crashes, ownership, NATS clusters and external
servers, a move to PostgreSQL.
"""
