"""The store on SQLite and on a real PostgreSQL server: migrations from an empty database
and from the previous schema version, round trips, and errors that say what is wrong."""

import sqlite3
import time

import pytest
from sqlalchemy import create_engine

from icefabric.controller.store import tables as t
from icefabric.controller.store.errors import StoreUnavailable, StoreUnusable
from icefabric.controller.store.migrations import LATEST, current_version, migrate
from icefabric.controller.store.repo import Repository


def test_migrations_from_empty_are_versioned_and_idempotent(database_url):
    eng = create_engine(database_url)
    assert current_version(eng) == 0
    assert migrate(eng) == list(range(1, LATEST + 1))
    assert migrate(eng) == []
    assert current_version(eng) == LATEST
    eng.dispose()


def test_migrations_from_schema_2_keep_its_data(database_url):
    eng = create_engine(database_url)
    assert migrate(eng, target=2) == [1, 2]
    with eng.begin() as c:  # what a schema-2 controller had stored
        c.execute(t.LinkDownV1Row.__table__.insert().values(a="leaf0", b="spine0", since=1.0))
        c.execute(t.HostRow.__table__.insert().values(
            host="h1", token_sha256="ab" * 32, nics="[]", agent_version="0.0.9",
            actuator="twin", enrolled_at=1.0, last_seen=2.0, applied_version=3))
        c.execute(t.FabricRow.__table__.insert().values(
            version=1, name="f", document='{"a": 1}', plan_seed=5, created_at=1.0))
        for host in ("h2", "h1"):  # a job reported before jobs were created
            c.execute(t.ReportRow.__table__.insert().values(
                job="gpt", host=host, updated_at=1.0, document='{"ranks": ['
                '{"rank": 0, "host": "h1"}, {"rank": 1, "host": "h2"}]}'))
    eng.dispose()
    repo = Repository(database_url)
    try:
        assert repo.applied_migrations == [3, 4] and LATEST == 4
        # a pair stored before cables had numbers is every cable (-1) until expanded
        assert repo.down_links() == {("leaf0", "spine0", -1)}
        (h,) = repo.hosts()
        assert (h.host, h.applied_version, h.agent_version) == ("h1", 3, "0.0.9")
        assert repo.load_fabric() == (1, "f", {"a": 1}, 5)
        assert repo.jobs() == {"gpt": ["h1", "h2"]}  # created on the hosts of its ranks
        repo.add_events("h1", [{"kind": "note", "message": "after the upgrade"}])
        assert repo.recent_events()[0]["message"] == "after the upgrade"
    finally:
        repo.close()


def test_a_newer_schema_is_refused_in_words(database_url):
    repo = Repository(database_url)
    with repo.engine.begin() as c:
        c.execute(t.SchemaMigration.__table__.insert().values(
            version=LATEST + 1, description="from the future", applied_at=0.0))
    repo.close()
    with pytest.raises(StoreUnusable, match=f"schema version {LATEST + 1} is newer"):
        Repository(database_url)


def test_round_trips(database_url):
    repo = Repository(database_url)
    try:
        assert repo.save_fabric("fab", {"x": [1, 2]}, 7, [("leaf0", "spine0", 0)]) == 1
        assert repo.save_fabric("fab", {"x": [3]}, 8, []) == 2
        assert repo.load_fabric() == (2, "fab", {"x": [3]}, 8)
        repo.set_links(down=[("leaf1", "spine1", 0), ("leaf1", "spine1", 1),
                             ("leaf2", "spine0", 0)], up=[])
        repo.set_links(down=[], up=[("leaf2", "spine0", 0), ("leaf1", "spine1", 1)])
        assert repo.down_links() == {("leaf1", "spine1", 0)}
        repo.set_links(down=[("leaf1", "spine1", 2)], up=[("leaf1", "spine1", -1)])
        assert repo.down_links() == {("leaf1", "spine1", 2)}  # -1 cleared the pair first
        repo.upsert_host("h1", "d1" * 32, [{"name": "eth0"}], "1", "twin")
        repo.upsert_host("h1", "d2" * 32, [], "2", "twin")  # re-enrolment rotates the digest
        assert [(h.host, h.token_sha256) for h in repo.hosts()] == [("h1", "d2" * 32)]
        repo.save_report("j", "h1", {"r": 1})
        repo.save_report("j", "h2", {"r": 2})
        repo.delete_report("j", "h1")
        assert repo.reports() == [("j", "h2", {"r": 2})]
        summaries = [{"version": v, "policy": "ecmp", "reason": "r" * 500, "created_at": 1.5,
                      "planning_ms": 2.0, "fabric_version": 2} for v in (1, 2)]
        for summary, docs in zip(summaries, ({"h1": b"[1]", "h2": b"[2]"}, {"h1": b"[3]"}),
                                 strict=True):
            repo.save_plan(summary, {}, docs)
        row, docs = repo.latest_plan()
        assert row.version == 2 and len(row.reason) == 200
        # each host's newest QP plans, with the version that wrote them
        assert docs == {"h1": (2, b"[3]"), "h2": (1, b"[2]")}
        assert repo.plan_summaries() == summaries[::-1]
        repo.ping()
    finally:
        repo.close()


def test_corrupt_sqlite_file_is_a_clear_error(tmp_path):
    db = tmp_path / "ice.db"
    db.write_bytes(b"this is not a database, it was overwritten by something" * 100)
    with pytest.raises(StoreUnusable, match="is not a valid SQLite database") as e:
        Repository(f"sqlite:///{db}")
    assert str(db) in str(e.value) and "restore it from a backup" in str(e.value)


def test_locked_sqlite_file_is_a_clear_error_at_start_and_later(tmp_path):
    db = tmp_path / "ice.db"
    repo = Repository(f"sqlite:///{db}", lock_timeout_s=0.2)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    try:
        with pytest.raises(StoreUnavailable, match=r"is locked by another process.*0\.2 s"):
            repo.add_events("h", [{"kind": "note"}])
        db2 = tmp_path / "fresh.db"
        sqlite3.connect(db2).close()
        other2 = sqlite3.connect(db2, isolation_level=None)
        other2.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailable, match="is locked"):
            Repository(f"sqlite:///{db2}", lock_timeout_s=0.2)
        other2.close()
    finally:
        other.execute("ROLLBACK")
        other.close()
    repo.add_events("h", [{"kind": "note"}])  # the lock is gone: writes work again
    assert len(repo.recent_events()) == 1
    repo.close()


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(StoreUnusable, match="directory .*nowhere does not exist"):
        Repository(f"sqlite:///{tmp_path}/nowhere/ice.db")


def test_acks_are_group_committed(database_url):
    import threading

    repo = Repository(database_url)
    write = repo._acks._write

    def first_waits(batch):  # the first transaction lasts until all 40 are submitted, so
        deadline = time.monotonic() + 10  # the test does not depend on the scheduler
        while repo._acks.batches == 0 and len(batch) + repo._acks._q.qsize() < 40:
            assert time.monotonic() < deadline, "acknowledgements never queued"
            time.sleep(0.001)
        write(batch)

    repo._acks._write = first_waits
    try:
        for i in range(40):
            repo.upsert_host(f"h{i}", f"{i:064x}", [], "1", "twin")
        threads = [threading.Thread(target=repo.set_applied, args=(f"h{i}", 5, 9.0))
                   for i in range(40)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert {(h.applied_version, h.last_seen) for h in repo.hosts()} == {(5, 9.0)}
        assert repo._acks.batches <= 2  # those queued meanwhile shared one transaction
        repo.set_applied("unknown-host", 5, 9.0)  # not enrolled: nothing to update
    finally:
        repo.close()


def test_group_commit_hands_each_batch_its_error():
    import asyncio
    import threading

    from icefabric.controller.store.batch import GroupCommit

    started, release, written, errors = threading.Event(), threading.Event(), [], []

    def write(batch):
        started.set()
        if not written:
            release.wait(5)  # the first batch is slow: the others queue behind it
        written.append(list(batch))
        if "bad" in batch:
            raise OSError("disk full")

    gc = GroupCommit(write)

    def call(x):
        try:
            gc.submit(x)
        except OSError as e:
            errors.append((x, str(e)))

    first = threading.Thread(target=call, args=("a",))
    first.start()
    started.wait(5)
    rest = [threading.Thread(target=call, args=(x,)) for x in ("b", "bad")]
    for th in rest:
        th.start()

    async def from_the_loop():
        try:
            await gc.submit_async("c")
        except OSError as e:
            errors.append(("c", str(e)))

    async def main():
        task = asyncio.create_task(from_the_loop())
        while gc._q.qsize() < 3:
            await asyncio.sleep(0.001)
        release.set()
        await task

    asyncio.run(main())
    for th in [first, *rest]:
        th.join(5)
    gc.close()
    assert written[0] == ["a"] and sorted(written[1]) == ["b", "bad", "c"]
    assert gc.batches == 2
    assert sorted(errors) == [("b", "disk full"), ("bad", "disk full"), ("c", "disk full")]
