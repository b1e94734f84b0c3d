#!/usr/bin/env bash
# The issue-34 measurements on a node with a core per process (16 cores), main
# against a base checkout, in one run; the GPU tests where torch sees CUDA.
#
#   bash benchmarks/sixteen_cores.sh OUTDIR [BASE]
#   STEPS=allreduce,ranks bash benchmarks/sixteen_cores.sh OUTDIR BASE
#
# STEPS (comma-separated, default every one): base, mechanisms, micro, ranks,
# allreduce, neighbour, gpu.
# BASE: a folder holding another checkout's hpc_ray/ package (its PYTHONPATH),
# e.g. `git archive e3857a5 hpc_ray | tar -x -C /tmp/base`. Wheels in .whl/ (a
# machine without a registry) are installed first. Each step has a time limit
# and appends to OUTDIR/log; a step that fails does not stop the next.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?OUTDIR}; BASE=${2:-}
mkdir -p "$OUT"; LOG=$OUT/log
export PYTHONUNBUFFERED=1
step() { echo "=== $* $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG"; }
PY=$(command -v python3)
if [ -d "$ROOT/.whl" ]; then
    step install wheels
    "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade "$ROOT"/.whl/*.whl >>"$LOG" 2>&1
fi
export PATH=$("$PY" -c 'import sys; print(sys.prefix)')/bin:$PATH
step machine
{ nproc; "$PY" -V; command -v mpiexec; nvidia-smi -L 2>&1 | head -2
  ls /proc/driver/nvidia/gpus 2>&1; ls /dev | grep -c '^nvidia[0-9]'
  timeout 60 mpiexec -n 16 "$PY" -c 'from mpi4py import MPI; c = MPI.COMM_WORLD; s = c.allreduce(1); c.rank or print("mpi ranks", s)'
} >>"$LOG" 2>&1 || { echo "MPI does not run: stopping" | tee -a "$LOG"; exit 1; }
cd /tmp    # executors start with `python -m` in the driver's directory
export PYTHONPATH=$ROOT
run() { local limit=$1; shift; timeout "$limit" "$@" >>"$LOG" 2>&1 || echo "(exit $?)" >>"$LOG"; }
STEPS=,${STEPS:-base,mechanisms,micro,ranks,allreduce,neighbour,gpu},
want() { [[ $STEPS == *,$1,* ]]; }

if [ -n "$BASE" ] && want base; then
    step "mechanisms: main (on) vs base (off), a core per process"
    run 150 "$PY" "$ROOT/benchmarks/mechanisms.py" --base "$BASE" --modes embedded,mpiexec \
        --rounds 3 --seconds 1
fi
want mechanisms && step "mechanisms of main, each on vs off" &&
run 150 "$PY" "$ROOT/benchmarks/mechanisms.py" --mechanisms none,spin,look,repoll,yield \
    --modes embedded,mpiexec --rounds 2 --seconds 0.4
if [ -n "$BASE" ] && want micro; then
    for round in 1 2; do
        for side in main base; do
            step "microbenchmark $side $round"
            [ $side = main ] && pp=$ROOT || pp=$BASE
            PYTHONPATH=$pp run 90 "$PY" "$ROOT/benchmarks/microbenchmark.py" \
                --systems hpc_ray,hpc_ray_mpi --reps 2 --duration 0.25 --warmup 0.25 \
                --only task_sync,task_async,actor_sync,actor_async,actor_nn_sync,actor_nn_async,actor_nn_sync_tasks,actor_nn_sync_long_tasks
        done
    done
fi
want ranks && step "ranks" &&
run 150 "$PY" "$ROOT/benchmarks/ranks.py" --ranks 3,8,16 --reps ${RANKS_REPS:-1} --timeout 60 \
    ${BASE:+--base "$BASE"}
if want allreduce; then
    for members in 2 8; do
        step "allreduce, $members members"
        run 150 "$PY" "$ROOT/benchmarks/allreduce.py" --members $members --repeat 3 \
            --sizes 1K,4K,64K,1M,16M --timeout 40 \
            --systems hpc_ray_exec,mpi4py${BASE:+,hpc_ray_exec_base} ${BASE:+--base "$BASE"}
    done
fi
want neighbour && step "neighbour" &&
run 120 "$PY" "$ROOT/benchmarks/neighbour.py" --modes embedded,mpiexec --rounds 6 --window 1
if want gpu && "$PY" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    step "GPU tests"
    (cd "$ROOT" && run 240 "$PY" -m pytest -q -x -p no:cacheprovider \
        tests/test_gpu_cuda.py tests/test_gpu_ids.py ${GPU_TESTS:-})
fi
step done
