"""The embedded OAuth authorization server (keys for now; the server arrives with its issue)."""
