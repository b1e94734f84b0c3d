#!/bin/bash
# Run an hpc_ray driver with MPICH's mpiexec (Hydra; also Intel MPI and MVAPICH, and
# the `mpich` wheel from PyPI): on a workstation, or inside a Slurm allocation, where
# Hydra reads the allocation and starts its per-node proxies through srun.
#
#   launch/mpich.sh [-n N] driver.py [driver args...]
#
# N defaults to $SLURM_NTASKS inside Slurm, else to 1 (Hydra's default).  PYTHON
# picks the interpreter (default: python on PATH).
set -euo pipefail

n=${SLURM_NTASKS:-}                       # inside Slurm: the allocation's task count
if [ "${1:-}" = "-n" ]; then n=$2; shift 2; fi
: "${1:?usage: launch/mpich.sh [-n N] driver.py [driver args...]}"

# Hydra needs no extra flags: it runs as root and oversubscribes cores without asking.
# It forwards SIGUSR1 to the ranks; hpc_ray's driver runs its on_preempt hooks.
# exec: this script's exit status is mpiexec's.
exec mpiexec ${n:+-n "$n"} "${PYTHON:-python}" -m hpc_ray "$@"
