"""A one-node Slurm cluster for the tests (cluster.py), its pytest fixture and drivers."""
