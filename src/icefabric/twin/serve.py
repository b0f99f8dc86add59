"""Run a real controller (uvicorn) on a free loopback port, in a thread or a subprocess.

Used by the digital twin's tests and the benchmark; only ever binds 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
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
    tests can kill it hard (SIGKILL) and restart it on the same database and port."""

    def __init__(self, env: dict[str, str], port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env}
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> str:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "icefabric", "controller", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", "warning"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_healthy(self.url, timeout_s)
        except TimeoutError:
            self.kill()
            raise
        return self.url

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None
