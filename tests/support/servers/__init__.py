"""Real servers a test starts: nats-server, PostgreSQL, SMTP, DNS, a nats-server with identities."""
