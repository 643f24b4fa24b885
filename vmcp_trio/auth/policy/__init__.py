"""What a caller may do once authenticated: Cedar authorization policies and rate limits."""
