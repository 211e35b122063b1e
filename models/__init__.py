"""Model cards for mlx-ssbd (installed as ``mlx_ssbd_models``): one JSON file per known model."""
