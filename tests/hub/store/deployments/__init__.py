"""Deployments in the store (hub/store/deployments): files, identities, versions."""
