"""Backend links: how the gateway talks to one backend, by transport."""
