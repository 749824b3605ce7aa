"""What hub and sidecar agree on for a deployment (runtime/sidecar_contract): containment, layout,
private state, records.
"""
