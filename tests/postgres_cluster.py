"""A throwaway PostgreSQL server for the tests: ``initdb`` into a temp dir, ``pg_ctl start``
on a free loopback port, one fresh database per test, removed at the end of the session.

The Debian package (``apt-get install postgresql``, done by ``.ci/run``) provides the
binaries in ``/usr/lib/postgresql/<major>/bin``. PostgreSQL refuses to run as root, so when
the tests run as root (CI) the server runs as the ``postgres`` user the package creates (or
``nobody``). ``ICE_TEST_POSTGRES=require`` (set by ``.ci/run``) turns "not installed" into a
test failure instead of a skip; ``ICE_TEST_POSTGRES=off`` skips the PostgreSQL variants.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

ENV = "ICE_TEST_POSTGRES"


class PostgresUnavailable(RuntimeError):
    pass


def _bin_dir() -> Path:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if dirs:
        return Path(dirs[-1])
    raise PostgresUnavailable("PostgreSQL server binaries not found (initdb); install the "
                              "Debian package: apt-get install postgresql")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    """One PostgreSQL server in a temp dir (``start``/``stop`` may be called repeatedly:
    the fault tests stop it to play a database outage)."""

    def __init__(self):
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="ice-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._n = itertools.count()
        self._user: dict = {}
        if os.geteuid() == 0:
            name = "postgres"
            try:
                pw = pwd.getpwnam(name)
            except KeyError:
                pw = pwd.getpwnam("nobody")
            self._user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "ice", "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")

    def _run(self, tool: str, *args: str) -> str:
        p = subprocess.run([str(self.bin / tool), *args], capture_output=True, text=True,
                           cwd=self.root, timeout=120, **self._user)
        if p.returncode != 0:
            raise PostgresUnavailable(f"{tool} failed ({p.returncode}): "
                                      f"{(p.stderr or p.stdout).strip()[-800:]}")
        return p.stdout

    def start(self) -> None:
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
                f"-c synchronous_commit=off -c full_page_writes=off -c max_connections=300")
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"),
                  "-w", "-t", "60", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql+psycopg://ice@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._n)}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=ice dbname=postgres",
                             autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        try:
            self.stop()
        except PostgresUnavailable:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster() -> PgCluster:
    """Start a cluster, or raise :class:`PostgresUnavailable` saying why not."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise PostgresUnavailable("psycopg is not installed (pip install -e '.[dev]')") \
            from None
    c = PgCluster()
    try:
        c.start()
    except BaseException:
        shutil.rmtree(c.root, ignore_errors=True)
        raise
    return c
