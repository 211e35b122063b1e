"""Service benchmarks: the server under load, through faults, beside hostile clients."""
