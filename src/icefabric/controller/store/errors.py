"""Errors of the persistence layer, and the translation of driver errors into them.

Every database failure leaves the repository as a :class:`StoreError` whose message says
what is wrong in words an operator can act on (which file or server, locked, read-only,
corrupt, unreachable), never as a driver traceback. :class:`StoreUnavailable` is
transient: the controller answers 503 and retries; :class:`StoreUnusable` cannot fix
itself and stops the controller at start.
"""

from __future__ import annotations

from sqlalchemy import exc
from sqlalchemy.engine import URL

from icefabric.errors import IceFabricError


class StoreError(IceFabricError):
    """The database cannot be used (base class of the store's errors)."""


class StoreUnavailable(StoreError):
    """Transient: server unreachable, file locked, I/O error. Retry later."""


class StoreUnusable(StoreError):
    """Permanent until an operator acts: corrupt or read-only file, newer schema."""


def describe(url: URL) -> str:
    """Where the database is, without the password."""
    if url.get_backend_name() == "sqlite":
        return f"SQLite file {url.database}"
    return f"PostgreSQL database {url.database!r} at {url.host or 'localhost'}:" \
           f"{url.port or 5432}"


def translate(e: Exception, url: URL, lock_timeout_s: float) -> StoreError:
    """A :class:`StoreError` for a SQLAlchemy/driver error ``e`` on database ``url``."""
    where = describe(url)
    orig = getattr(e, "orig", None) or e
    msg = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    low = msg.lower()
    if "file is not a database" in low or "malformed" in low:
        return StoreUnusable(f"{where} is not a valid SQLite database ({msg}); restore it "
                             f"from a backup, or move it away to start with an empty one")
    if "readonly database" in low or "read-only" in low:
        return StoreUnusable(f"{where} is read-only ({msg}); the controller must write it")
    if "database is locked" in low or "database table is locked" in low:
        return StoreUnavailable(f"{where} is locked by another process or connection "
                                f"(waited {lock_timeout_s:g} s)")
    if "unable to open database file" in low:
        return StoreUnusable(f"cannot open {where} ({msg}): check the path and that its "
                             f"directory is writable")
    if isinstance(e, (exc.OperationalError, exc.InterfaceError, exc.TimeoutError)) or \
            getattr(e, "connection_invalidated", False):
        return StoreUnavailable(f"{where} is unavailable: {msg}")
    return StoreError(f"{where}: {type(orig).__name__}: {msg}")
