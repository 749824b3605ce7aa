"""Mail that leaves, end to end: sent, signed, bounced, replied to."""
