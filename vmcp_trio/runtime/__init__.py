"""Process-level runtime: logging, and serving the gateway until a signal stops it."""
