"""Run a real controller (uvicorn) on a free loopback port, in a thread or a subprocess.

Used by the digital twin's tests and the benchmark; only ever binds 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"controller at {url} not healthy after {timeout_s} s")


class ThreadedController:
    """``with ThreadedController(settings) as url: ...`` — uvicorn in a daemon thread."""

    def __init__(self, settings, port: int | None = None, log_level: str = "warning"):
        import uvicorn

        from icefabric.controller.app import create_app

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(settings)
        cfg = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level=log_level,
                             access_log=False, lifespan="on", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, name="ice-controller",
                                       daemon=True)

    @property
    def core(self):
        return self.app.state.core

    def start(self) -> str:
        self.thread.start()
        wait_healthy(self.url)
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class SubprocessController:
    """The controller as a separate process (``python -m icefabric controller serve``), so
    tests can kill it hard (SIGKILL) and restart it on the same database and port.

    ``command`` replaces ``python -m icefabric`` (the fault tests run the controller
    through a wrapper that adds fault points, or inside a mount namespace); its output
    goes to ``log_path`` (a pipe nobody reads would block a chatty controller).
    """

    def __init__(self, env: dict[str, str], port: int | None = None,
                 command: list[str] | None = None, log_path: str | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env}
        self.command = command or [sys.executable, "-m", "icefabric"]
        self.log_path = log_path or os.path.join(tempfile.mkdtemp(prefix="ice-ctl-"), "log")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> str:
        """Start and wait until healthy; raises ``RuntimeError`` with the controller's
        output if it exits first."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.command, "controller", "serve", "--host", "127.0.0.1", "--port",
                 str(self.port), "--log-level", "warning"],
                env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                rc, self.proc = self.proc.returncode, None
                raise RuntimeError(f"controller exited with code {rc}: {self.output()[-2000:]}")
            try:
                wait_healthy(self.url, min(0.5, max(0.0, deadline - time.monotonic())))
                return self.url
            except TimeoutError:
                if time.monotonic() >= deadline:
                    self.kill()
                    raise

    def output(self) -> str:
        """Everything the controller process wrote so far."""
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
