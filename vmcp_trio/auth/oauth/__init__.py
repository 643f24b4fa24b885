"""The one OAuth client core: everything vmcp does as an OAuth *client*, whoever it does it for
(incoming auth reading an issuer, the authorization server's upstream logins, token exchange for
a backend, the proxy's remote login).

One concept per module:

* :mod:`.discovery`: bounded JSON fetches, and finding metadata: a configured issuer's (OIDC
  Discovery, RFC 8414), a protected resource's (RFC 9728) and an authorization server's the way
  an MCP client looks for it.
* :mod:`.pkce`: the S256 verifier and challenge (RFC 7636), and whether a server supports it.
* :mod:`.authorize`: the authorization request URL (sans-IO).
* :mod:`.tokens`: the token endpoint: client authentication, the request, OAuth error answers,
  and reading a token response (with ``tokenResponseMapping``).
* :mod:`.registration`: dynamic client registration (RFC 7591).

The modules are imported by their own names (``from ..oauth.tokens import token_request``);
this package re-exports nothing.
"""
