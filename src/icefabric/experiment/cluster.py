"""Tasks on a Ray cluster, for runs that outgrow one machine: sweep points
(:mod:`icefabric.sweeps.run`) and ECMP draws (:mod:`icefabric.experiment.draws`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from icefabric.errors import IceFabricError


class ClusterError(IceFabricError):
    """Ray is not installed, or the cluster cannot be reached."""


def ray_tasks(fn: Callable, calls: list[tuple], address: str, *, shared: tuple = (),
              ordered: bool = False) -> Iterator:
    """``fn(*shared, *args)`` for every ``args`` of ``calls``, as Ray tasks of one CPU each.

    ``address``: ``auto``, ``host:port``, ``ray://...``, or ``local`` to start a private
    instance for this call; a Ray this process already initialised is used as it is.
    Results come in completion order, or in the order of ``calls`` with ``ordered``;
    tasks still pending when the caller stops iterating are cancelled. ``shared``
    (inputs every task takes, e.g. a scenario and its fabric) is sent to the cluster once.
    """
    try:
        import ray
    except ImportError:
        raise ClusterError("--ray needs Ray: pip install 'ice-fabric[ray]'") from None
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise ClusterError(f"cannot connect to Ray at {address!r}: {e}") from None
    try:
        task = ray.remote(num_cpus=1)(fn)
        refs = [ray.put(v) for v in shared]
        pending = [task.remote(*refs, *args) for args in calls]
        try:
            if ordered:
                while pending:
                    yield ray.get(pending.pop(0))
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                yield ray.get(ready[0])
        finally:
            for ref in pending:
                ray.cancel(ref)
    finally:
        if started:
            ray.shutdown()
