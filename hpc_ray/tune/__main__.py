"""``python -m hpc_ray.tune list-trials DIR`` (Ray 0.7's ``tune`` command)."""
from ..cli import tune_cli

tune_cli(prog_name="python -m hpc_ray.tune")
