"""Boundary 2: the credential each backend gets, never the client's own token."""
