"""The hub process: its restart and orderly stop, its memory, several hubs on PostgreSQL."""
