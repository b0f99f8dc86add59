"""The controller's errors: each becomes one HTTP status in :mod:`.app` (422, 404, 403,
409); the store's own errors (:mod:`.store.errors`) become 503."""

from __future__ import annotations


class NotFound(LookupError):
    """404: no such job, host, report or plan version."""


class Conflict(RuntimeError):
    """409: the request does not fit the current state (no fabric yet, other hosts)."""


class Invalid(ValueError):
    """422: the request is well formed but its values do not fit the fabric."""


class Forbidden(PermissionError):
    """The token may not do this (403): e.g. an agent reporting another host's link."""
