"""The deployments' routes (hub/api/routes/workflows): versions, schedules, listings, mail
settings, failure policies, sleep.
"""
