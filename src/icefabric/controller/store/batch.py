"""Group commit: many threads' small writes in one transaction, each caller returning only
once its write is committed.

When a plan is published, every agent acknowledges it at once; one transaction per
acknowledgement would queue them behind each other (a SQLite commit costs milliseconds, so
a thousand agents would wait seconds). Here the first caller becomes the leader and
commits everything pending; callers arriving meanwhile wait and go into the next
transaction together (the classic leader/follower group commit of database logs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class GroupCommit(Generic[T]):
    """``submit(item)`` blocks until ``write(batch)`` committed a batch holding ``item``
    (and raises that batch's error, if any).

    Parameters
    ----------
    write : callable(list) — writes a batch in one transaction.
    """

    def __init__(self, write: Callable[[list[T]], None]):
        self._write = write
        self._cv = threading.Condition()
        self._pending: list[T] = []
        self._next = 0  # id of the batch pending items will go into
        self._done = 0  # batches below this id are finished
        self._busy = False
        self._errors: dict[int, BaseException | None] = {}
        self.batches = 0  # transactions made (for tests and metrics)

    def submit(self, item: T) -> None:
        with self._cv:
            self._pending.append(item)
            mine = self._next
            while self._done <= mine:
                if self._busy:
                    self._cv.wait()
                    continue
                self._busy = True  # lead: commit everything pending, mine included
                batch, self._pending = self._pending, []
                bid, self._next = self._next, self._next + 1
                self._cv.release()
                err: BaseException | None = None
                try:
                    self._write(batch)
                except BaseException as e:  # handed to every caller of the batch
                    err = e
                finally:
                    self._cv.acquire()
                self._errors[bid] = err
                self._errors.pop(bid - 1024, None)
                self._done, self._busy = bid + 1, False
                self.batches += 1
                self._cv.notify_all()
            err = self._errors.get(mine)
        if err is not None:
            raise err
