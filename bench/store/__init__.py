"""SQLite and PostgreSQL under the hub's stores: statements, triggers, drivers, bytes on disk.

The hub's writer alone, what a statement or a trigger costs in SQLite, which thread a
transaction runs on, which PostgreSQL driver, and the bytes a steady load leaves on disk.
"""
