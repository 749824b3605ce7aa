"""One component alone, in one process or against a stand-in: no `mailrun up`.

The actor kernel, the transport's round trip, HTTP servers against each other (and the
load client the other rooms share), the hub's mail lane, a sidecar's cycle beside a fake hub.
"""
