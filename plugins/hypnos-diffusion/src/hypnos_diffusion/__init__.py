"""Hypnos image plugin: diffusers pipelines served with real memory tiers."""
