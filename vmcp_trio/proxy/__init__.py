"""``vmcp proxy``: the standalone transparent proxy to one remote MCP server (the seed's
``svc proxy``), and what ``vmcp proxy stdio`` and the tunnel agent share with it.

Modules: ``headers`` (which headers cross, which may be injected; no I/O), ``credentials`` (what
the remote is sent: a bearer token, an exchanged token), ``forwarder`` (one request there and its
response back, streamed), ``server`` (the HTTP face: guards, incoming auth, forwarding, draining),
``settings`` (what a process is told), ``command`` (the flags) and ``options`` (the flags
checked, as settings). The process is assembled by :mod:`vmcp_trio.app.proxy`. The proxy never
imports the gateway, and the gateway never imports the proxy; what both need lives in
:mod:`vmcp_trio.auth`, :mod:`vmcp_trio.http` and :mod:`vmcp_trio.protocol`.
"""
