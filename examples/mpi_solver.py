"""Existing mpi4py code, run across a group of hpc_ray actors.

``cg_poisson`` and ``write_solution`` below are ordinary mpi4py code: a
conjugate-gradient solve of the 2-D Poisson equation on a grid split into
blocks of rows (halo exchange with ``Sendrecv``, dot products with
``Allreduce``), and an HDF5 write of the distributed result (parallel HDF5
when h5py was built with MPI, else gathered to one rank). They know nothing of
hpc_ray: each ``Block`` actor lives inside its worker rank (``in_rank=True``),
joins a collective group and hands the group's communicator
(``hpc_ray.collective.get_communicator``) to them.

    python examples/mpi_solver.py --ranks 3            # embedded: 3 worker ranks
    mpiexec -n 4 python examples/mpi_solver.py         # 3 workers + the driver

The problem: -Δu = 2(x(1-x) + y(1-y)) on the unit square, u = 0 on the
boundary, whose exact solution u = x(1-x) y(1-y) the 5-point stencil
reproduces exactly: the printed error is the solver's alone.

In-rank actors share their rank's process: a crash in one ends the MPI job.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import hpc_ray as ray
from hpc_ray import collective

# --- plain mpi4py code (no hpc_ray in here) -------------------------------------------


def block_rows(n: int, rank: int, size: int) -> tuple[int, int]:
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def apply_laplacian(comm, u: np.ndarray, h: float) -> np.ndarray:
    """The 5-point -Δ on this rank's rows, with halo rows from the neighbours."""
    from mpi4py import MPI
    rank, size = comm.Get_rank(), comm.Get_size()
    up = rank - 1 if rank > 0 else MPI.PROC_NULL
    down = rank + 1 if rank < size - 1 else MPI.PROC_NULL
    n = u.shape[1]
    above = np.zeros(n)
    below = np.zeros(n)
    # Send my first row up while receiving the row below me, then the reverse.
    comm.Sendrecv(np.ascontiguousarray(u[0]), dest=up, sendtag=1, recvbuf=below,
                  source=down, recvtag=1)
    comm.Sendrecv(np.ascontiguousarray(u[-1]), dest=down, sendtag=2, recvbuf=above,
                  source=up, recvtag=2)
    padded = np.zeros((u.shape[0] + 2, n + 2))
    padded[1:-1, 1:-1] = u
    padded[0, 1:-1] = above
    padded[-1, 1:-1] = below
    return (4 * u - padded[:-2, 1:-1] - padded[2:, 1:-1]
            - padded[1:-1, :-2] - padded[1:-1, 2:]) / (h * h)


def cg_poisson(comm, f: np.ndarray, h: float, tol: float = 1e-8, maxiter: int = 2000):
    """Solve -Δu = f (rows of the grid split over ``comm``) by conjugate gradients.

    Returns:
        (u, iterations, relative residual)
    """
    from mpi4py import MPI

    def dot(a, b):
        return comm.allreduce(float(np.vdot(a, b)), op=MPI.SUM)

    u = np.zeros_like(f)
    r = f.copy()
    p = r.copy()
    rr = dot(r, r)
    norm_f = np.sqrt(dot(f, f))
    it = 0
    while it < maxiter and np.sqrt(rr) > tol * norm_f:
        ap = apply_laplacian(comm, p, h)
        alpha = rr / dot(p, ap)
        u += alpha * p
        r -= alpha * ap
        rr_new = dot(r, r)
        p = r + (rr_new / rr) * p
        rr = rr_new
        it += 1
    return u, it, float(np.sqrt(rr) / norm_f)


def write_solution(comm, path: str, u: np.ndarray, row0: int, n: int) -> str:
    """Write the distributed solution as one ``/u`` dataset of shape (n, n)."""
    import h5py
    if h5py.get_config().mpi:
        # Parallel HDF5: every rank writes its own rows of one shared file.
        with h5py.File(path, "w", driver="mpio", comm=comm) as f:
            ds = f.create_dataset("u", (n, n), dtype=u.dtype)
            ds[row0:row0 + len(u)] = u
        return "parallel (mpio)"
    # Serial h5py: gather the blocks on rank 0, which writes.
    blocks = comm.gather(u, root=0)
    if comm.Get_rank() == 0:
        with h5py.File(path, "w") as f:
            f.create_dataset("u", data=np.concatenate(blocks))
    comm.Barrier()
    return "gathered to rank 0"


# --- the hpc_ray part ----------------------------------------------------------------


@ray.remote(num_cpus=1, in_rank=True)
class Block:
    """One block of rows of the grid, in one worker rank."""

    def __init__(self, n: int, index: int, size: int) -> None:
        self.n, self.index, self.size = n, index, size
        self.h = 1.0 / (n + 1)
        self.row0, self.row1 = block_rows(n, index, size)
        y = (np.arange(self.row0, self.row1) + 1) * self.h
        x = (np.arange(n) + 1) * self.h
        qx, qy = x * (1 - x), y * (1 - y)
        self.f = 2 * (np.outer(qy, np.ones(n)) + np.outer(np.ones(len(y)), qx))
        self.exact = np.outer(qy, qx)
        self.u = None

    def join(self, group: str) -> int:
        collective.init_collective_group(self.size, self.index, group_name=group)
        self.comm = collective.get_communicator(group)
        return self.comm.Get_rank()

    def solve(self, tol: float) -> dict:
        start = time.perf_counter()
        self.u, iterations, residual = cg_poisson(self.comm, self.f, self.h, tol)
        local_err = float(np.abs(self.u - self.exact).max())
        return {"iterations": iterations, "residual": residual,
                "max_error": self.comm.allreduce(local_err, op=_max()),
                "rows": [self.row0, self.row1], "seconds": time.perf_counter() - start}

    def write(self, path: str) -> str:
        return write_solution(self.comm, path, self.u, self.row0, self.n)


def under_mpiexec() -> bool:
    from hpc_ray.launch import mpi
    return mpi().COMM_WORLD.Get_size() > 1


def _max():
    from mpi4py import MPI
    return MPI.MAX


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=None,
                        help="solver actors (default: every worker rank; embedded: 3)")
    parser.add_argument("--n", type=int, default=96, help="interior grid points per side")
    parser.add_argument("--tol", type=float, default=1e-8, help="relative residual")
    parser.add_argument("--out", default="poisson_solution.h5", help="HDF5 output file")
    args = parser.parse_args()

    # Embedded, init() spawns the worker ranks; under mpiexec they exist already
    # (and num_cpus would mean CPUs per rank).
    ray.init(**({} if under_mpiexec() else {"num_cpus": args.ranks or 3}))
    size = args.ranks or int(ray.cluster_resources().get("CPU", 1))
    blocks = [Block.remote(args.n, i, size) for i in range(size)]
    ray.get([b.join.remote("poisson") for b in blocks])
    stats = ray.get([b.solve.remote(args.tol) for b in blocks])
    how = ray.get([b.write.remote(args.out) for b in blocks])[0]
    s = stats[0]
    print(f"ranks {size}, grid {args.n}x{args.n}, rows per rank "
          f"{[st['rows'] for st in stats]}")
    print(f"CG iterations {s['iterations']}, relative residual {s['residual']:.2e}, "
          f"max error vs exact {s['max_error']:.2e}, {s['seconds']:.2f} s")
    import h5py
    with h5py.File(args.out, "r") as f:
        shape = f["u"].shape
    print(f"wrote {args.out} ({how}), dataset /u {shape}")
    ray.shutdown()


if __name__ == "__main__":
    main()
