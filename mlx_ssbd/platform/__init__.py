"""Everything that depends on the machine: which BLAS MLX uses, device and dtype policy, the decode
kernel, and where mlx-ssbd keeps its files. ``backend`` is imported first by ``mlx_ssbd``; nothing
here compiles or writes anything on import (``gemv.build`` is called by the command line only).
"""
