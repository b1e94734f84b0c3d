#!/bin/bash
# Run an hpc_ray driver with srun and PMI-2, inside a Slurm allocation (an sbatch
# script or salloc): Slurm starts every rank itself, no mpiexec involved.
#
#   launch/srun_pmi2.sh [-n N] driver.py [driver args...]
#
# For MPICH (including the `mpich` wheel from PyPI), Intel MPI and MVAPICH, which
# speak PMI-2 to Slurm's mpi/pmi2 plugin (`srun --mpi=list` shows it).  For Open MPI
# use launch/srun_pmix.sh.  N defaults to the allocation's task count.
set -euo pipefail

: "${SLURM_JOB_ID:?srun_pmi2.sh runs inside a Slurm allocation (sbatch or salloc)}"
n=
if [ "${1:-}" = "-n" ]; then n=$2; shift 2; fi
: "${1:?usage: launch/srun_pmi2.sh [-n N] driver.py [driver args...]}"

# Slurm >= 22.05: srun no longer inherits --cpus-per-task from sbatch; hand it on.
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi
# srun forwards SIGUSR1 and SIGTERM to every rank.  exec: the exit status is srun's.
# --kill-on-bad-exit=1: a rank that dies ends the job at once (srun names its node and task).
exec srun --kill-on-bad-exit=1 --mpi=pmi2 ${n:+-n "$n"} "${PYTHON:-python}" -m hpc_ray "$@"
