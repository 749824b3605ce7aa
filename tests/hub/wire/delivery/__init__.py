"""Delivery to sidecars (hub/wire/delivery): dispatch, marks, redelivery, rollouts, policies,
health, cancel, mail context.
"""
