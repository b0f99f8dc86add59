"""Native code: the verbs-layer shim ``icefab_verbs.c`` (LD_PRELOAD), built at install time
where libibverbs headers exist; see :mod:`icefabric.agent.shim`."""
