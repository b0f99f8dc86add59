"""Max-min fair rates (re-exported from :mod:`icefabric.dataplane.fairness`, where the
controller's rate allocation can use the same code)."""

from icefabric.dataplane.fairness import maxmin_entries, maxmin_rates

__all__ = ["maxmin_entries", "maxmin_rates"]
