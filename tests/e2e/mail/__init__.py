"""Mail in, end to end: HTTP, SMTP and NATS ingress, bad input, redelivery, the recipes."""
