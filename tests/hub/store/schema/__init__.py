"""The store's schema and migrations (hub/store/schema, migrations): both DDLs, the change feed,
failure policies.
"""
