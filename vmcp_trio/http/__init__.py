"""HTTP plumbing on trio: the upstream client, the ASGI server side and its limits."""
