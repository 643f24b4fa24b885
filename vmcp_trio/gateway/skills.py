"""Skills (``io.modelcontextprotocol/skills``) from many backends: one list, and where each goes.

Sans-IO, beside :mod:`.aggregation` (which calls it): the backends' ``skills/list`` entries as
they sent them, merged under the plan's conflict resolution, and the addresses a client uses
mapped to the backend and the URI it knows. The rules it keeps:

* A skill is listed as its backend lists it (``uri``, ``frontmatter``, ``resources`` with their
  digests and sizes), byte for byte apart from the URIs below: the gateway never changes a
  skill's front matter or its files, so every digest still matches what a read returns.
* ``prefix``: a ``skill://`` URI of backend ``B`` is presented as ``skill://B/<rest>``: the
  backend's name becomes the first segment of the skill path (its authority), so the skill path
  still ends with the skill's name, and two backends may serve the same skill path. Every
  ``skill://`` URI of that backend is presented so: its skills and their files, its resources
  and resource templates, what a read or a directory read answers. A URI of another scheme is
  kept, the first backend in order keeping it.
* ``priority`` and ``manual``: URIs are kept (they are the backends' addresses, as resources'
  are). On a collision ``priority`` gives the skill to the earliest backend in
  ``priorityOrder``; ``manual`` drops every skill involved and reports it (a gateway must not
  guess which backend a client meant).
* At most :data:`MAX_SKILLS` skills of a backend are listed; an entry that is not an object with
  a string ``uri`` is left out.
* Where a URI goes (:meth:`SkillIndex.target`): a presented ``skill://B/...`` URI to ``B``
  (when ``B`` is a backend, under ``prefix``); else the backend whose listed skill has that
  URI, or whose skill directory holds it (its files, its subdirectories).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EXTENSION", "MAX_SKILLS", "SKILL_METHODS", "SkillIndex", "SkillUris",
           "offered_settings", "present_result"]

EXTENSION = "io.modelcontextprotocol/skills"
SKILL_METHODS = frozenset({"skills/list", "skills/get", "resources/directory/read"})
MAX_SKILLS = 1000
_SCHEME = "skill://"


def offered_settings(capabilities: Mapping[str, Any]) -> dict[str, Any] | None:
    """A backend's Skills settings (``{}`` or ``{"directoryRead": true}``), None when it does
    not declare the extension."""
    extensions = capabilities.get("extensions")
    settings = extensions.get(EXTENSION) if isinstance(extensions, dict) else None
    return settings if isinstance(settings, dict) else None


@dataclass(frozen=True)
class SkillUris:
    """How ``skill://`` URIs are presented: with the backend's name first (``prefix``), or as
    they are."""

    backends: frozenset[str] = frozenset()
    """The backends whose name may lead a presented URI (empty: URIs are kept)."""

    def presented(self, backend: str, uri: str) -> str:
        if self.backends and uri.startswith(_SCHEME):
            return f"{_SCHEME}{backend}/{uri[len(_SCHEME):]}"
        return uri

    def decoded(self, uri: str) -> tuple[str, str] | None:
        """(backend, its URI) of a presented ``skill://`` URI; None for any other."""
        if not self.backends or not uri.startswith(_SCHEME):
            return None
        backend, slash, rest = uri[len(_SCHEME):].partition("/")
        if not slash or not rest or backend not in self.backends:
            return None
        return backend, _SCHEME + rest

    def presented_skill(self, backend: str, skill: dict[str, Any]) -> dict[str, Any]:
        """A skill entry with its URIs presented (the same object when nothing changes)."""
        if not self.backends:
            return skill
        shown = {**skill, "uri": self.presented(backend, str(skill.get("uri")))}
        files = skill.get("resources")
        if isinstance(files, list):
            shown["resources"] = self.presented_items(backend, files)
        return shown

    def presented_items(self, backend: str, items: list[Any]) -> list[Any]:
        """A list of ``{uri, ...}`` items with their URIs presented."""
        return [{**item, "uri": self.presented(backend, item["uri"])}
                if isinstance(item, dict) and isinstance(item.get("uri"), str) else item
                for item in items]


def _root(uri: str) -> str:
    """A skill's directory: its SKILL.md URI without the file name."""
    return uri.rpartition("/")[0]


@dataclass(frozen=True)
class SkillIndex:
    """The skills a session's client sees, and where their URIs go."""

    skills: tuple[dict[str, Any], ...] = ()
    owners: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Presented skill URI -> (backend, its URI)."""
    roots: tuple[tuple[str, str, str], ...] = ()
    """(presented directory, backend, its directory) of every listed skill, longest first."""
    uris: SkillUris = field(default_factory=SkillUris)
    ttl_ms: int | None = None
    """The shortest ``ttlMs`` the backends gave (None: no backend lists skills)."""
    private: bool = False
    """A backend said ``cacheScope: private``."""
    directory_read: bool = False
    """A backend serving skills declared ``directoryRead``."""

    def target(self, uri: str) -> tuple[str, str] | None:
        """(backend, its URI) for a URI a client names: a skill, a file or directory of one."""
        decoded = self.uris.decoded(uri)
        if decoded is not None:
            return decoded
        owner = self.owners.get(uri)
        if owner is not None:
            return owner
        for presented, backend, root in self.roots:
            if uri == presented or uri.startswith(presented + "/"):
                return backend, root + uri[len(presented):]
        return None


def merge_skills(listings: Sequence[tuple[str, list[dict[str, Any]], Mapping[str, Any]]],
                 uris: SkillUris, *, manual: bool) -> tuple[SkillIndex, list[str]]:
    """The merged index of ``(backend, skills, the list result's cache fields and settings)``
    in priority order, and the conflicts to report."""
    chosen: dict[str, tuple[str, str, dict[str, Any]]] = {}
    clashes: dict[str, list[str]] = {}
    ttl: int | None = None
    private = directory_read = False
    for backend, skills, facts in listings:
        given = facts.get("ttlMs")
        ttl_ms = given if isinstance(given, int) and not isinstance(given, bool) else 0
        ttl = ttl_ms if ttl is None else min(ttl, ttl_ms)
        private = private or facts.get("cacheScope") != "public"
        directory_read = directory_read or facts.get("directoryRead") is True
        for skill in skills[:MAX_SKILLS]:
            uri = skill.get("uri")
            if not isinstance(uri, str):
                continue
            shown = uris.presented_skill(backend, skill)
            presented = shown["uri"]
            if presented in chosen:
                clashes.setdefault(presented, [chosen[presented][0]]).append(backend)
                continue
            chosen[presented] = (backend, uri, shown)
    conflicts = []
    for presented, backends in clashes.items():
        if manual:
            del chosen[presented]
            conflicts.append(f"skill {presented[:200]} is offered by {', '.join(backends)}: "
                             "left out (conflictResolution manual)")
    owners = {presented: (backend, uri) for presented, (backend, uri, _) in chosen.items()}
    roots = sorted(((_root(presented), backend, _root(uri))
                    for presented, (backend, uri, _) in chosen.items()),
                   key=lambda root: len(root[0]), reverse=True)
    return SkillIndex(tuple(shown for _, _, shown in chosen.values()), owners, tuple(roots),
                      uris, ttl, private, directory_read), conflicts


def present_result(method: str, backend: str, result: dict[str, Any],
                   uris: SkillUris) -> dict[str, Any]:
    """A backend's answer to ``skills/get``, ``resources/directory/read`` or
    ``resources/read``, with its ``skill://`` URIs presented (unchanged under ``priority`` and
    ``manual``)."""
    if not uris.backends:
        return result
    if method == "skills/get" and isinstance(result.get("skill"), dict):
        return {**result, "skill": uris.presented_skill(backend, result["skill"])}
    key = "contents" if method == "resources/read" else "resources"
    items = result.get(key)
    if not isinstance(items, list):
        return result
    return {**result, key: uris.presented_items(backend, items)}
