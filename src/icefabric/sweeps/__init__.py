"""Parameter sweeps: grids of scenario variants, run locally or on a cluster."""
