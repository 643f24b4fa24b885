"""The embedded OAuth 2.1 authorization server: endpoints and rules (``server``, ``validation``),
signing keys (``keys``, ``keygen``), opaque tokens and signed forms (``opaque``), client metadata
documents (``cimd``), the chained upstream logins (``upstream``, ``refresher``) and the storage
of it all (``storage``: memory or Redis)."""
