#!/bin/bash
# Run an hpc_ray driver with srun and PMIx, inside a Slurm allocation (an sbatch
# script or salloc): Slurm starts every rank itself, no mpiexec involved.
#
#   launch/srun_pmix.sh [-n N] driver.py [driver args...]
#
# Needs an MPI built with PMIx (Open MPI >= 4, or MPICH configured --with-pmix) and
# Slurm's mpi/pmix plugin: `srun --mpi=list` must show pmix.  For MPICH and Intel MPI
# without PMIx use launch/srun_pmi2.sh.  N defaults to the allocation's task count.
set -euo pipefail

: "${SLURM_JOB_ID:?srun_pmix.sh runs inside a Slurm allocation (sbatch or salloc)}"
n=
if [ "${1:-}" = "-n" ]; then n=$2; shift 2; fi
: "${1:?usage: launch/srun_pmix.sh [-n N] driver.py [driver args...]}"

# Slurm >= 22.05: srun no longer inherits --cpus-per-task from sbatch; hand it on.
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi
# srun forwards SIGUSR1 and SIGTERM to every rank.  exec: the exit status is srun's.
# --kill-on-bad-exit=1: a rank that dies ends the job at once (srun names its node and task).
exec srun --kill-on-bad-exit=1 --mpi=pmix ${n:+-n "$n"} "${PYTHON:-python}" -m hpc_ray "$@"
