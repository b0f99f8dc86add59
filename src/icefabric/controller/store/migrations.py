"""Versioned schema migrations (a small alembic-like table of our own).

Each migration is ``(version, description, fn(connection))``, applied in order inside one
transaction and recorded in ``ice_schema_migrations``; running :func:`migrate` again is a
no-op. Add new migrations at the end; never edit an applied one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from sqlalchemy import Connection, Engine, inspect, select

from icefabric.controller.store import tables as t
from icefabric.controller.store.errors import StoreUnusable


def _v1(conn: Connection) -> None:
    t.Base.metadata.create_all(conn, tables=[
        t.FabricRow.__table__, t.LinkDownV1Row.__table__, t.HostRow.__table__,
        t.ReportRow.__table__, t.PlanRow.__table__, t.HostPlanRow.__table__,
    ])


def _v2(conn: Connection) -> None:
    t.Base.metadata.create_all(conn, tables=[t.EventRow.__table__])


def _v3(conn: Connection) -> None:
    """Jobs are registered; a job already reported keeps the hosts of its ranks."""
    t.Base.metadata.create_all(conn, tables=[t.JobRow.__table__])
    hosts: dict[str, set[str]] = {}
    for job, doc in conn.execute(select(t.ReportRow.job, t.ReportRow.document)):
        hosts.setdefault(job, set()).update(r["host"] for r in json.loads(doc)["ranks"])
    now = time.time()
    for job, hs in sorted(hosts.items()):
        conn.execute(t.JobRow.__table__.insert().values(
            job=job, hosts=json.dumps(sorted(hs)), created_at=now))


def _v4(conn: Connection) -> None:
    """Down links per cable: a pair stored before means every cable of it (-1), which the
    controller expands against its fabric when it loads them."""
    t.Base.metadata.create_all(conn, tables=[t.CableDownRow.__table__])
    old = t.LinkDownV1Row.__table__
    for a, b, since in conn.execute(select(old.c.a, old.c.b, old.c.since)):
        conn.execute(t.CableDownRow.__table__.insert().values(a=a, b=b, cable=-1, since=since))
    old.drop(conn)


MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "fabric, link states, hosts, reports, plans", _v1),
    (2, "events table with time index", _v2),
    (3, "registered jobs (the hosts that may report each)", _v3),
    (4, "down links per cable (parallel cables named by index)", _v4),
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


def migrate(engine: Engine, target: int = LATEST) -> list[int]:
    """Apply every pending migration up to ``target``; returns the versions applied now."""
    with engine.begin() as conn:
        t.Base.metadata.create_all(conn, tables=[t.SchemaMigration.__table__])
    done = current_version(engine)
    if done > LATEST:
        raise StoreUnusable(f"database schema version {done} is newer than this "
                            f"controller's ({LATEST}); upgrade the controller")
    applied = []
    for version, desc, fn in MIGRATIONS:
        if version <= done or version > target:
            continue
        with engine.begin() as conn:
            fn(conn)
            conn.execute(t.SchemaMigration.__table__.insert().values(
                version=version, description=desc, applied_at=time.time()))
        applied.append(version)
    return applied


def sqlite_pragmas(lock_timeout_s: float):
    """A connect hook: WAL (readers never wait for the writer) and a busy timeout, so
    writes queue behind another writer for up to ``lock_timeout_s`` instead of failing."""

    def hook(dbapi_conn, _record) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(lock_timeout_s * 1000)}")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    return hook


__all__ = ["LATEST", "MIGRATIONS", "current_version", "migrate", "sqlite_pragmas"]
