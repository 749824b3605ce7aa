"""Upgrades end to end: state dirs an older release left, workflow versions, older frames on the
wire.
"""
