"""Everything that depends on the machine: which BLAS MLX uses, device and dtype policy, the native
code (the CPU kernel for quantized layers and the sgemv shim, both built by ``pip install``), and
where mlx-ssbd keeps its files. ``backend`` is imported first by ``mlx_ssbd``; nothing here compiles
or writes anything on import.
"""
