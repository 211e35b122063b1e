"""Engine benchmarks: what a pass, a decode step, a kernel, a batch and a long session cost."""
