"""hub.store.sql: statements, bulk writes, reads, query plans."""
