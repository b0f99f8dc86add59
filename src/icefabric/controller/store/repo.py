"""The repository: every database read and write of the controller, in short transactions.

Writes are serialized by one lock per process (SQLite allows a single writer; WAL lets
readers continue), so many agents writing at once queue instead of failing with
``database is locked``. PostgreSQL works the same through its URL. Every driver error
leaves as a :class:`~icefabric.controller.store.errors.StoreError` that says what is wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import bindparam, create_engine, delete, event, exc, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from icefabric.controller.cables import Cable
from icefabric.controller.store import tables as t
from icefabric.controller.store.batch import GroupCommit
from icefabric.controller.store.errors import (
    StoreError,
    StoreUnavailable,
    StoreUnusable,
    describe,
    translate,
)
from icefabric.controller.store.migrations import migrate, sqlite_pragmas

#: a SQLite file's filesystem with less free space than this is not ready: a plan for
#: a large fleet takes megabytes
MIN_FREE_BYTES = 64 << 20


def check_sqlite_path(database: str | None) -> None:
    """Fail early, in words, when a SQLite file cannot be written where it is configured
    (SQLite itself would only say "unable to open database file" at the first write)."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    d = path.parent.resolve()
    if not d.is_dir():
        raise StoreUnusable(f"cannot create SQLite file {path}: directory {d} does not exist")
    # os.access also sees read-only mounts (EROFS), for root too.
    if not os.access(d, os.W_OK | os.X_OK):
        raise StoreUnusable(f"cannot write SQLite file {path}: directory {d} is read-only "
                            f"(read-only filesystem or permissions); SQLite also needs to "
                            f"create its journal files there")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise StoreUnusable(f"SQLite file {path} is read-only (permissions)")


_SET_APPLIED = (update(t.HostRow.__table__).where(t.HostRow.host == bindparam("b_host"))
                .values(applied_version=bindparam("b_version"), last_seen=bindparam("b_seen")))


class Repository:
    """Database access for the controller.

    Parameters
    ----------
    url : str — SQLAlchemy database URL (``sqlite:///path`` or ``postgresql+psycopg://…``).
    lock_timeout_s : float — how long a SQLite write waits for another writer's lock, and
        a PostgreSQL connection attempt for the server, before the store gives up.

    Raises
    ------
    StoreError
        The database cannot be opened, migrated or written (message says why).
    """

    def __init__(self, url: str, *, lock_timeout_s: float = 10.0):
        u = make_url(url)
        self.url = u
        self.lock_timeout_s = lock_timeout_s
        self.backend = u.get_backend_name()
        kw: dict = {}
        if self.backend == "sqlite":
            check_sqlite_path(u.database)
            kw["connect_args"] = {"check_same_thread": False, "timeout": lock_timeout_s}
        else:
            kw.update(pool_size=10, max_overflow=20, pool_pre_ping=True,
                      pool_timeout=lock_timeout_s)
            if u.get_driver_name() == "psycopg":
                kw["connect_args"] = {"connect_timeout": max(1, round(lock_timeout_s))}
        self.engine = create_engine(u, **kw)
        if self.backend == "sqlite":
            event.listen(self.engine, "connect", sqlite_pragmas(lock_timeout_s))
        try:
            self.applied_migrations = migrate(self.engine)
        except exc.SQLAlchemyError as e:
            self.engine.dispose()
            raise translate(e, u, lock_timeout_s) from None
        except StoreError:
            self.engine.dispose()
            raise
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        self._write = threading.Lock()
        self._acks = GroupCommit(self._set_applied_many)

    def close(self) -> None:
        self._acks.close()
        self.engine.dispose()

    def session(self) -> Session:
        return self._session()

    @contextmanager
    def _reading(self) -> Iterator[Session]:
        try:
            with self.session() as s:
                yield s
        except exc.SQLAlchemyError as e:
            raise translate(e, self.url, self.lock_timeout_s) from None

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        """One transaction under the process's write lock; committed on success."""
        try:
            with self._write, self.session() as s, s.begin():
                yield s
        except exc.SQLAlchemyError as e:
            raise translate(e, self.url, self.lock_timeout_s) from None

    def ping(self) -> None:
        """Raise :class:`StoreError` unless the database answers a query now."""
        with self._reading() as s:
            s.execute(select(1))

    def check_writable(self) -> None:
        """Raise :class:`StoreError` unless a write commits now: one transaction adds a
        64 KiB row (about what a report takes) and removes it, so a read-only file or
        server, a held lock or a server out of space shows here before a real write meets
        it. A SQLite file also needs room to grow: the probe reuses the pages it freed
        last time, so free space on the file's filesystem is checked as well."""
        if self.backend == "sqlite" and self.url.database not in (None, "", ":memory:"):
            d = Path(self.url.database).resolve().parent
            free = shutil.disk_usage(d).free
            if free < MIN_FREE_BYTES:
                raise StoreUnavailable(f"{describe(self.url)}: only {free >> 20} MiB free "
                                       f"on {d}: the disk is (nearly) full")
        with self._writing() as s:
            row = t.EventRow(t=time.time(), host="", kind="readyz", document=" " * 65536)
            s.add(row)
            s.flush()
            s.delete(row)

    # -- fabric -----------------------------------------------------------------------------
    def save_fabric(self, name: str, document: dict, plan_seed: int,
                    down: Iterable[Cable]) -> int:
        text = json.dumps(document, separators=(",", ":"))
        with self._writing() as s:
            v = s.execute(select(t.FabricRow.version).order_by(t.FabricRow.version.desc())
                          .limit(1)).scalar() or 0
            s.add(t.FabricRow(version=v + 1, name=name, document=text, plan_seed=plan_seed,
                              created_at=time.time()))
            s.execute(delete(t.CableDownRow))
            now = time.time()
            for a, b, k in down:
                s.add(t.CableDownRow(a=a, b=b, cable=k, since=now))
            return v + 1

    def load_fabric(self) -> tuple[int, str, dict, int] | None:
        with self._reading() as s:
            row = s.execute(select(t.FabricRow).order_by(t.FabricRow.version.desc())
                            .limit(1)).scalar()
            if row is None:
                return None
            return row.version, row.name, json.loads(row.document), row.plan_seed

    def set_links(self, down: Iterable[Cable], up: Iterable[Cable]) -> None:
        """Cables ``down`` go down, ``up`` come back (an ``up`` cable of index -1 clears
        every cable of its pair)."""
        now = time.time()
        row = t.CableDownRow
        with self._writing() as s:
            for a, b, k in up:
                s.execute(delete(row).where(row.a == a, row.b == b,
                                            *([row.cable == k] if k >= 0 else [])))
            for a, b, k in down:
                if s.get(row, (a, b, k)) is None:
                    s.add(row(a=a, b=b, cable=k, since=now))

    def down_links(self) -> set[Cable]:
        """Down cables ``(a, b, k)``; ``k`` -1 is every cable of the pair (schema 3)."""
        with self._reading() as s:
            return {(r.a, r.b, r.cable) for r in s.execute(select(t.CableDownRow)).scalars()}

    # -- hosts ------------------------------------------------------------------------------
    def upsert_host(self, host: str, token_sha256: str, nics: list[dict], agent_version: str,
                    actuator: str) -> None:
        now = time.time()
        with self._writing() as s:
            row = s.get(t.HostRow, host)
            if row is None:
                s.add(t.HostRow(host=host, token_sha256=token_sha256, nics=json.dumps(nics),
                                agent_version=agent_version, actuator=actuator,
                                enrolled_at=now, last_seen=now, applied_version=0))
            else:
                row.token_sha256 = token_sha256
                row.nics = json.dumps(nics)
                row.agent_version = agent_version
                row.actuator = actuator
                row.enrolled_at = now
                row.last_seen = now

    def hosts(self) -> list[t.HostRow]:
        with self._reading() as s:
            return list(s.execute(select(t.HostRow).order_by(t.HostRow.host)).scalars())

    def set_applied(self, host: str, version: int, seen: float) -> None:
        """Record the plan version a host applied; concurrent calls share a transaction."""
        self._acks.submit((host, version, seen))

    async def set_applied_async(self, host: str, version: int, seen: float) -> None:
        """:meth:`set_applied` for the event loop (no thread waits for the commit)."""
        await self._acks.submit_async((host, version, seen))

    def _set_applied_many(self, acks: list[tuple[str, int, float]]) -> None:
        # One UPDATE executed for every host (its last ack); a host no longer enrolled
        # matches no row. The ORM's bulk update took ~5 times longer, holding the GIL.
        rows = {h: {"b_host": h, "b_version": v, "b_seen": seen} for h, v, seen in acks}
        with self._writing() as s:
            s.execute(_SET_APPLIED, list(rows.values()))

    # -- jobs -------------------------------------------------------------------------------
    def save_job(self, job: str, hosts: list[str]) -> None:
        with self._writing() as s:
            s.merge(t.JobRow(job=job, hosts=json.dumps(hosts), created_at=time.time()))

    def delete_job(self, job: str) -> None:
        """Forget the job and every report of it."""
        with self._writing() as s:
            s.execute(delete(t.ReportRow).where(t.ReportRow.job == job))
            s.execute(delete(t.JobRow).where(t.JobRow.job == job))

    def jobs(self) -> dict[str, list[str]]:
        with self._reading() as s:
            return {r.job: json.loads(r.hosts) for r in s.execute(select(t.JobRow)).scalars()}

    # -- reports ----------------------------------------------------------------------------
    def save_report(self, job: str, host: str, document: dict) -> None:
        text = json.dumps(document, separators=(",", ":"))
        with self._writing() as s:
            row = s.get(t.ReportRow, (job, host))
            if row is None:
                s.add(t.ReportRow(job=job, host=host, document=text, updated_at=time.time()))
            else:
                row.document = text
                row.updated_at = time.time()

    def delete_report(self, job: str, host: str) -> None:
        with self._writing() as s:
            s.execute(delete(t.ReportRow).where(t.ReportRow.job == job, t.ReportRow.host == host))

    def reports(self) -> list[tuple[str, str, dict]]:
        with self._reading() as s:
            return [(r.job, r.host, json.loads(r.document))
                    for r in s.execute(select(t.ReportRow)).scalars()]

    # -- plans ------------------------------------------------------------------------------
    def save_plan(self, summary: dict, path_plan: dict, host_qps: dict[str, bytes]) -> None:
        """Store the plan of ``summary`` (a PlanSummary as JSON: its version, policy, reason,
        creation time, planning time and fabric version are the row's columns);
        ``host_qps``: the QP plans (JSON array) of the hosts whose plans changed with it."""
        version = summary["version"]
        with self._writing() as s:
            s.add(t.PlanRow(version=version, policy=summary["policy"],
                            reason=summary["reason"][:200], created_at=summary["created_at"],
                            planning_ms=summary["planning_ms"],
                            fabric_version=summary["fabric_version"],
                            summary=json.dumps(summary, separators=(",", ":")),
                            path_plan=json.dumps(path_plan, separators=(",", ":"))))
            s.flush()
            s.add_all([t.HostPlanRow(version=version, host=h, document=d.decode())
                       for h, d in host_qps.items()])

    def latest_plan(self) -> tuple[t.PlanRow, dict[str, tuple[int, bytes]]] | None:
        """The newest plan and, per host, its newest QP plans with the version that
        wrote them."""
        with self._reading() as s:
            row = s.execute(select(t.PlanRow).order_by(t.PlanRow.version.desc())
                            .limit(1)).scalar()
            if row is None:
                return None
            # Each host's newest QP plan (rows are written only when a host's plan changes).
            docs = {}
            for r in s.execute(select(t.HostPlanRow).where(t.HostPlanRow.version <= row.version)
                               .order_by(t.HostPlanRow.version)).scalars():
                docs[r.host] = (r.version, r.document.encode())
            return row, docs

    def plan_summaries(self, limit: int = 100) -> list[dict]:
        with self._reading() as s:
            rows = s.execute(select(t.PlanRow.summary).order_by(t.PlanRow.version.desc())
                             .limit(limit)).scalars()
            return [json.loads(x) for x in rows]

    def plan_summary(self, version: int) -> dict | None:
        with self._reading() as s:
            row = s.get(t.PlanRow, version)
            return json.loads(row.summary) if row else None

    # -- events -----------------------------------------------------------------------------
    def add_events(self, host: str, events: list[dict]) -> None:
        now = time.time()
        with self._writing() as s:
            s.add_all([t.EventRow(t=now, host=host, kind=e["kind"],
                                  document=json.dumps(e, separators=(",", ":")))
                       for e in events])

    def recent_events(self, limit: int = 100) -> list[dict]:
        with self._reading() as s:
            rows = s.execute(select(t.EventRow).order_by(t.EventRow.id.desc()).limit(limit))
            return [{"id": r.id, "t": r.t, "host": r.host, **json.loads(r.document)}
                    for r in rows.scalars()]
