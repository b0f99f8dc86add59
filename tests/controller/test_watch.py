"""Long-poll wake-ups reach only the hosts a plan changed."""

from __future__ import annotations

import asyncio
import threading
import time

from icefabric.controller.watch import HostWatch


def test_publish_wakes_only_the_named_hosts():
    async def main():
        w = HostWatch()
        w.bind(asyncio.get_running_loop())
        t0 = time.monotonic()
        waits = {h: asyncio.create_task(_timed(w, h, t0)) for h in ("a", "b")}
        await asyncio.sleep(0.05)
        # the planner thread publishes
        threading.Thread(target=w.publish, args=(["a", "c"],)).start()
        return {h: await t for h, t in waits.items()}, w

    done, w = asyncio.run(main())
    assert done["a"] < 0.4 <= done["b"]  # a woke on the plan, b waited its full timeout
    assert w._waiting == {}  # nobody left parked


async def _timed(w: HostWatch, host: str, t0: float) -> float:
    await w.wait(host, 0.4)
    return time.monotonic() - t0
