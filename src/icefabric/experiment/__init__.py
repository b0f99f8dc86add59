"""Experiments: scenario -> fabric + workload -> policies -> engine -> results."""
