"""What a deployment costs at rest, end to end: scale to zero, and what stays on disk under load."""
