"""Boundary 1: incoming authentication modes, their caches and the hot path."""
