"""Group commit: many small writes in one transaction, each caller resuming only once its
write is committed.

When a plan is published, every agent acknowledges it at once; one transaction per
acknowledgement would queue them behind each other (a SQLite commit costs milliseconds, so
a thousand agents would wait seconds), and a thread per waiting request costs the event
loop more than the write. Here one writer thread commits everything queued in one
transaction; items queued meanwhile go into the next one together (the group commit of
database logs). Callers wait in a thread (:meth:`GroupCommit.submit`) or, from the event
loop, without one (:meth:`GroupCommit.submit_async`).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
Done = Callable[[BaseException | None], None]
_STOP = object()


def _settle(fut: asyncio.Future, err: BaseException | None) -> None:
    if not fut.done():
        fut.set_exception(err) if err is not None else fut.set_result(None)


class GroupCommit(Generic[T]):
    """Batches ``write(items)`` calls; a daemon writer thread starts on first use.

    Parameters
    ----------
    write : callable(list) — writes a batch in one transaction (raises on failure; every
        caller of that batch gets the error).
    """

    def __init__(self, write: Callable[[list[T]], None]):
        self._write = write
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.batches = 0  # transactions made (for tests)

    def submit(self, item: T) -> None:
        """Block until ``item`` is committed."""
        done, box = threading.Event(), []
        self._put(item, lambda err: (box.append(err), done.set()))
        done.wait()
        if box[0] is not None:
            raise box[0]

    async def submit_async(self, item: T) -> None:
        """Wait, without a thread, until ``item`` is committed."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._put(item, lambda err: loop.call_soon_threadsafe(_settle, fut, err))
        await fut

    def close(self) -> None:
        if self._thread is not None:
            self._q.put(_STOP)
            self._thread.join(timeout=30)
            self._thread = None

    def _put(self, item: T, done: Done) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="ice-group-commit")
                self._thread.start()
        self._q.put((item, done))

    def _run(self) -> None:
        while True:
            first = self._q.get()
            if first is _STOP:
                return
            batch = [first]
            while True:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    self._q.put(_STOP)
                    break
                batch.append(nxt)
            err: BaseException | None = None
            try:
                self._write([item for item, _ in batch])
            except Exception as e:  # handed to every caller of the batch
                err = e
            self.batches += 1
            for _, done in batch:
                done(err)
