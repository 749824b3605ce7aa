"""Example workflows shipped as package data: the sources ``mailrun demo`` deploys."""
