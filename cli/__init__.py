"""The ``mlx-ssbd`` command line (installed as ``mlx_ssbd_cli``)."""
