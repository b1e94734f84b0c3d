"""A small MPI solver a task starts with MPI_Comm_spawn (task_spawns_mpi.py):
sums its share of range(n), reduces to the parent, then says it is done (after
MPI_Finalize, so its /dev/shm segment is gone too) in the file ARGV[1]-RANK."""
import sys

from mpi4py import MPI

parent = MPI.Comm.Get_parent()
rank = parent.Get_rank()
n = parent.bcast(None, root=0)
parent.reduce(sum(range(rank, n, parent.Get_size())), op=MPI.SUM, root=0)
parent.Disconnect()
MPI.Finalize()
open(f"{sys.argv[1]}-{rank}", "w").close()
