"""What owners and hubs hold in the store (hub/store/sessions, sleep): leases, sleeps, steps taken
over.
"""
