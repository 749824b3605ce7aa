"""In-process doubles: a hub's wire side and a scripted sidecar, a scripted hub, transport
readers.
"""
