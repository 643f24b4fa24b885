"""A session's answers about skills: ``skills/list`` from its catalog, and its backends' answers
about skill URIs as its client sees them.

One job, beside :mod:`.session` (which dispatches to it); the merging rules are
:mod:`.skills`'. The rules it keeps:

* ``skills/list`` is answered from the session's catalog (:meth:`~.session_catalog.
  SessionCatalog.fresh`: never older than the backends' shortest ``ttlMs``), in one page,
  without the skills the caller may not read (the gateway's policies, then the owning
  backend's own, each as ``read_resource`` on the skill's URI).
* Its ``ttlMs`` is what is left of the shortest one the backends gave; its ``cacheScope`` is
  ``private`` when a backend said so or when policies chose what this caller sees, else
  ``public``.
* ``skills/get``, ``resources/directory/read`` and ``resources/read`` go to the owning backend
  (:mod:`.routing`); their answers come back with ``skill://`` URIs as the client sees them
  (:func:`~.skills.present_result`), and so does a backend's ``notifications/resources/updated``
  (while the session has a catalog: it is built before anything can be subscribed to).
"""

from __future__ import annotations

from ..auth.identity import Identity
from ..protocol.jsonrpc import ErrorResponse, Message, Notification, Request, Response
from .admission import Gate
from .session_catalog import SessionCatalog
from .skills import present_result

__all__ = ["PRESENTED", "list_skills", "presented", "presented_update"]

PRESENTED = frozenset({"skills/get", "resources/directory/read", "resources/read"})
"""The answers whose ``skill://`` URIs are presented as the client sees them."""


async def list_skills(catalog: SessionCatalog, gate: Gate | None, identity: Identity,
                      request: Request) -> Response:
    built = await catalog.fresh()
    index = built.skills
    skills = list(index.skills)
    if gate is not None:
        skills = await gate.visible(identity, "skills/list", skills, built)
    ttl_ms = max(0, (index.ttl_ms or 0) - int(catalog.skills_age() * 1000))
    private = index.private or (gate is not None and bool(gate.policies or gate.backends))
    return Response(request.id, {"skills": skills, "ttlMs": ttl_ms,
                                 "cacheScope": "private" if private else "public"})


async def presented(catalog: SessionCatalog, request: Request, backend: str,
                    reply: Response | ErrorResponse) -> Response | ErrorResponse:
    """``reply`` from ``backend`` with its skill URIs as the client sees them."""
    if request.method not in PRESENTED or not isinstance(reply, Response):
        return reply
    uris = (await catalog.get()).skills.uris
    if not uris.backends:
        return reply
    return Response(reply.id, present_result(request.method, backend, reply.result, uris))


def presented_update(catalog: SessionCatalog, backend: str, message: Message) -> Message:
    """A backend's message, a ``notifications/resources/updated`` with its URI as the client
    sees it."""
    if not isinstance(message, Notification) or \
            message.method != "notifications/resources/updated":
        return message
    built, params = catalog.built, message.params or {}
    uri = params.get("uri")
    if built is None or not built.skills.uris.backends or not isinstance(uri, str):
        return message
    return Notification(message.method, {**params,
                                         "uri": built.skills.uris.presented(backend, uri)})
