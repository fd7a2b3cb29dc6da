"""Hypnos on a Ray cluster (the `hypnos-server[ray]` extra): node agents and the front's backend; imports ray lazily."""
