"""Authentication at both boundaries: who the caller is (incoming) and what each backend gets
(outgoing)."""
