"""The agent's end of the verbs shim's Unix socket.

Each CCL process that runs the shim holds one stream connection; every message is one text
line ``KIND key=value ...`` (the list is in ``native/icefab_verbs.c``). The shim asks
(``QP``) and waits a bounded time for ``PLAN``/``NONE``; it tells (``RTR``,
``GONE``, ``DONE``); the agent pushes ``SET`` to change a live QP. A connection that sends
something else is closed: the shim then fails open.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

MAX_LINE = 512
INT_FIELDS = frozenset({"seq", "pid", "port", "lqpn", "rqpn", "acc", "span", "ok", "sport",
                        "planned", "sport_err", "rate_err", "rate_kbps", "srate"})


class ShimProtocolError(ValueError):
    pass


def parse_line(line: str) -> tuple[str, dict[str, str | int]]:
    """``"QP seq=1 dev=mlx5_0"`` -> ``("QP", {"seq": 1, "dev": "mlx5_0"})``."""
    kind, *parts = line.split()
    if not kind.isupper():
        raise ShimProtocolError(f"not a shim message: {line[:80]!r}")
    fields: dict[str, str | int] = {}
    for p in parts:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise ShimProtocolError(f"bad field {p[:40]!r} in {kind}")
        try:
            fields[k] = int(v) if k in INT_FIELDS else v
        except ValueError:
            raise ShimProtocolError(f"{kind}: {k} must be an integer, got {v[:20]!r}") from None
    return kind, fields


def format_line(kind: str, **fields: str | int) -> bytes:
    return (" ".join([kind, *(f"{k}={v}" for k, v in fields.items())]) + "\n").encode()


class ShimConn:
    """One shim process: its identity (``pid``, ``job``, the launcher's ``rank``) and a
    thread-safe ``send``."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.pid = 0
        self.job: str | None = None
        self.rank: int | None = None
        self._wlock = threading.Lock()

    def send(self, data: bytes) -> bool:
        with self._wlock:
            try:
                self.sock.sendall(data)
                return True
            except OSError:
                return False


Handler = Callable[[ShimConn, str, dict], bytes | None]


class ShimServer:
    """Serves the shim socket at ``path`` in daemon threads (one per CCL process).

    ``handler(conn, kind, fields)`` is called for every message except ``HELLO``; what it
    returns is sent back (the reply to ``QP``). ``on_close(conn)`` runs when a process goes.
    The socket file is made world-connectable (``mode``) because CCL jobs rarely run as the
    agent's user; restrict it with the directory's permissions if needed.
    """

    def __init__(self, path: str | Path, handler: Handler,
                 on_close: Callable[[ShimConn], None] = lambda c: None, mode: int = 0o666):
        self.path = Path(path)
        self.handler = handler
        self.on_close = on_close
        self.mode = mode
        self._server: socketserver.ThreadingUnixStreamServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[ShimConn] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_socket():
            self.path.unlink()  # a previous agent's socket: nobody serves it any more
        outer = self

        class _Req(socketserver.StreamRequestHandler):
            def handle(self):
                outer._serve(self.request, self.rfile)

        srv = socketserver.ThreadingUnixStreamServer(str(self.path), _Req)
        srv.daemon_threads = True
        os.chmod(self.path, self.mode)
        self._server = srv
        self._thread = threading.Thread(target=srv.serve_forever, name="shim-socket",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and let go of every CCL process (its shim fails open, and tells
        the next agent its QPs when it connects again)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            conns, self._conns = self._conns, set()
        for c in conns:
            with contextlib.suppress(OSError):
                c.sock.shutdown(socket.SHUT_RDWR)
        self.path.unlink(missing_ok=True)

    def _serve(self, sock: socket.socket, rfile) -> None:
        conn = ShimConn(sock)
        with self._lock:
            self._conns.add(conn)
        try:
            while raw := rfile.readline(MAX_LINE + 1):
                if len(raw) > MAX_LINE:
                    raise ShimProtocolError("line too long")
                kind, fields = parse_line(raw.decode("ascii", "replace"))
                if kind == "HELLO":
                    conn.pid = int(fields.get("pid", 0))
                    job = str(fields.get("job", "-"))
                    conn.job = None if job == "-" else job
                    rank = str(fields.get("rank", "-"))
                    conn.rank = int(rank) if rank.isdigit() else None
                    continue
                out = self.handler(conn, kind, fields)
                if out is not None:
                    conn.send(out)
        except (ShimProtocolError, ValueError, OSError) as e:
            log.warning("shim connection (pid %s) closed: %s", conn.pid, e)
        finally:
            with self._lock:
                self._conns.discard(conn)
            self.on_close(conn)
