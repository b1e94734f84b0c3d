"""The MPI behaviour the sleep flags rely on (``comm.SleepFlags``): a message
whose ``isend`` has returned is seen by the receiver's ``comm.control_waiting``
(its last look before it sleeps), even with no progress made in between.

Rank 0 sends, then says so through shared memory (a ``SleepFlags`` byte, as a
sender reads a sleeper's flag); rank 1 waits for that byte without calling MPI,
then looks once. Reports how many looks missed a message.
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from mpi4py import MPI

from _harness import check, ok, report

from hpc_ray.transport.comm import SleepFlags, control_waiting
from hpc_ray.transport.tags import Tag

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
ROUNDS = 2000
if rank == 0:
    flags, fd = SleepFlags.create(2)
    comm.bcast((os.getpid(), fd), root=0)
else:
    flags = SleepFlags.open(*comm.bcast(None, root=0), 2)
comm.Barrier()
if rank == 0:
    os.close(fd)
missed = 0
for i in range(ROUNDS):
    if rank == 0:
        req = comm.isend([i], 1, tag=Tag.CONTROL)
        flags.up(1)                     # "sent"
        while flags.asleep(1):          # until rank 1 has looked and received it
            pass
        req.wait()
    else:
        while not flags.asleep(1):
            pass
        if not control_waiting(comm):
            missed += 1
        check(comm.recv(source=0, tag=Tag.CONTROL) == [i])
        flags.down(1)
if rank == 1:
    report("missed", missed)
    check(missed == 0, f"{missed} of {ROUNDS} looks missed a sent message")
comm.Barrier()
flags.close()
ok("probe_after_isend")
