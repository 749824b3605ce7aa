"""What a handler gets and calls (sidecar/execution/handler_io): workflows, steps, send, time, mail
items.
"""
