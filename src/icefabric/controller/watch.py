"""Long-poll wake-ups: async handlers wait here for a plan newer than the one they have."""

from __future__ import annotations

import asyncio
import time


class VersionWatch:
    """Lets async long-poll handlers wait for a plan version newer than theirs."""

    def __init__(self, version: int = 0):
        self.version = version
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    def publish(self, version: int) -> None:
        self.version = version
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._fire)

    def _fire(self) -> None:
        ev, self._event = self._event, asyncio.Event()
        if ev is not None:
            ev.set()

    async def wait_newer(self, after: int, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while self.version <= after and self._event is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except TimeoutError:
                break
        return self.version
