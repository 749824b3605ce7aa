"""Sessions and ownership at the hub (hub/wire/sessions): hello, fences, owners, senders."""
