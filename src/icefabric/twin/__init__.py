"""Digital twin: the simulator plays fabric and hosts against a real controller."""
