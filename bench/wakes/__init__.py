"""Processes starting, joining and falling asleep: what a wake costs, and on whose side.

A sidecar's start and its workflow's load, its join at the hub, scale to zero through
`mailrun up --idle-stop`, `up`'s poll of the hub, and a `mailrun` command's own start.
"""
