"""Long-poll wake-ups: an async handler parks here until its host's document changes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class HostWatch:
    """Wakes the long-polls of the hosts a new plan changed, and only those.

    :meth:`publish` is called by the planner thread after it swapped in the new plan; the
    wake-up runs on the event loop, after any handler that read the old plan has parked,
    so no change is missed between a handler's check and its wait.
    """

    def __init__(self):
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[str, set[asyncio.Future]] = {}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def publish(self, hosts: Iterable[str]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake, list(hosts))

    def _wake(self, hosts: list[str]) -> None:
        for h in hosts:
            for fut in self._waiting.pop(h, ()):
                if not fut.done():
                    fut.set_result(None)

    async def wait(self, host: str, timeout_s: float) -> None:
        """Return when ``host``'s document changed, or after ``timeout_s`` seconds."""
        if self._loop is None:
            return
        fut = self._loop.create_future()
        waiting = self._waiting.setdefault(host, set())
        waiting.add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            waiting.discard(fut)
            if not waiting and self._waiting.get(host) is waiting:
                del self._waiting[host]
