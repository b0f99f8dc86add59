"""Open a page in real headless Chromium (Debian's ``chromium`` package) over the DevTools
protocol and report what a user's browser would see: console errors, uncaught exceptions,
every network request, whether images decoded, and the text of every table.

No browser is downloaded: the system binary is started with a fresh profile and the flags
that keep it off the network (no component updates, sync or background requests)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.request import urlopen

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0")

# Tables as the reader sees them (innerText), keyed by id.
_TABLES_JS = """JSON.stringify(Object.fromEntries([...document.querySelectorAll('table[id]')]
  .map(t => [t.id, {caption: t.caption ? t.caption.innerText : '',
    head: t.tHead ? [...t.tHead.rows[0].cells].map(c => c.innerText) : [],
    rows: [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.innerText))}])))"""
_IMAGES_JS = "JSON.stringify([...document.images].map(i => i.complete && i.naturalWidth > 0))"
# Text blocks as the reader sees them (innerText of every div with an id), keyed by id.
_BLOCKS_JS = """JSON.stringify(Object.fromEntries([...document.querySelectorAll('div[id]')]
  .map(d => [d.id, d.innerText])))"""


def chromium_path() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run installs Debian's chromium")
        pytest.skip("chromium not installed (apt-get install chromium)")
    return exe


@dataclass
class Page:
    url: str
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    tables: dict = field(default_factory=dict)
    images_ok: list[bool] = field(default_factory=list)
    blocks: dict = field(default_factory=dict)
    title: str = ""


class _Cdp:
    def __init__(self, ws_url: str):
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
            self.events.append(msg)

    def wait_event(self, method: str, timeout_s: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for e in self.events:
                if e.get("method") == method:
                    return e
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(method)


def _errors(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            out.append("exception: " + p["exceptionDetails"].get("text", ""))
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console: " + " ".join(str(a.get("value")) for a in p.get("args", [])))
        elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
            out.append("log: " + p["entry"].get("text", ""))
    return out


def open_page(path: Path, profile_dir: Path) -> Page:
    """Load ``path`` in a fresh headless Chromium and collect what the page did."""
    proc = subprocess.Popen([chromium_path(), *FLAGS, f"--user-data-dir={profile_dir}",
                             "about:blank"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        port_file = profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            target = next(t for t in json.load(r) if t["type"] == "page")
        cdp = _Cdp(target["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log", "Network"):
            cdp.call(f"{domain}.enable")
        url = path.resolve().as_uri()
        cdp.call("Page.navigate", url=url)
        cdp.wait_event("Page.loadEventFired")
        page = Page(url)
        page.title = cdp.call("Runtime.evaluate", expression="document.title")["result"]["value"]
        page.tables = json.loads(cdp.call("Runtime.evaluate",
                                          expression=_TABLES_JS)["result"]["value"])
        page.images_ok = json.loads(cdp.call("Runtime.evaluate",
                                             expression=_IMAGES_JS)["result"]["value"])
        page.blocks = json.loads(cdp.call("Runtime.evaluate",
                                          expression=_BLOCKS_JS)["result"]["value"])
        page.errors = _errors(cdp.events)
        page.requests = [e["params"]["request"]["url"] for e in cdp.events
                         if e.get("method") == "Network.requestWillBeSent"]
        cdp.ws.close()
        return page
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
