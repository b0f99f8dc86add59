"""Versioned schema migrations (a small alembic-like table of our own).

Each migration is ``(version, description, fn(connection))``, applied in order inside one
transaction and recorded in ``ice_schema_migrations``; running :func:`migrate` again is a
no-op. Add new migrations at the end; never edit an applied one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Connection, Engine, inspect, select, text

from icefabric.controller.store import tables as t


def _v1(conn: Connection) -> None:
    t.Base.metadata.create_all(conn, tables=[
        t.FabricRow.__table__, t.LinkStateRow.__table__, t.HostRow.__table__,
        t.ReportRow.__table__, t.PlanRow.__table__, t.HostPlanRow.__table__,
    ])


def _v2(conn: Connection) -> None:
    t.Base.metadata.create_all(conn, tables=[t.EventRow.__table__])


MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "fabric, link states, hosts, reports, plans", _v1),
    (2, "events table with time index", _v2),
]
LATEST = MIGRATIONS[-1][0]


def current_version(engine: Engine) -> int:
    """Highest applied migration (0 for an empty database)."""
    if not inspect(engine).has_table(t.SchemaMigration.__tablename__):
        return 0
    with engine.connect() as conn:
        v = conn.execute(select(t.SchemaMigration.version)
                         .order_by(t.SchemaMigration.version.desc()).limit(1)).scalar()
    return int(v or 0)


def migrate(engine: Engine) -> list[int]:
    """Apply every pending migration; returns the versions applied now."""
    with engine.begin() as conn:
        t.Base.metadata.create_all(conn, tables=[t.SchemaMigration.__table__])
    done = current_version(engine)
    applied = []
    for version, desc, fn in MIGRATIONS:
        if version <= done:
            continue
        with engine.begin() as conn:
            fn(conn)
            conn.execute(t.SchemaMigration.__table__.insert().values(
                version=version, description=desc, applied_at=time.time()))
        applied.append(version)
    if done > LATEST:
        raise RuntimeError(f"database schema version {done} is newer than this controller "
                           f"({LATEST}); upgrade the controller")
    return applied


def sqlite_pragmas(dbapi_conn, _record) -> None:
    """WAL and a busy timeout so many agents' writes queue instead of failing."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


__all__ = ["LATEST", "MIGRATIONS", "current_version", "migrate", "sqlite_pragmas", "text"]
