"""The embedded OAuth 2.1 authorization server: the server, its routing and login sessions
(``server``), one module per endpoint family (``registration``, ``authorize``, ``callback``,
``token``, ``revocation``) and what they share (``endpoints``), the request rules
(``validation``), signing keys (``keys``, ``keygen``), opaque tokens and signed forms
(``opaque``), client metadata documents (``cimd``), the chained upstream logins (``upstream``,
``refresher``) and the storage of it all (``storage``: memory or Redis)."""
