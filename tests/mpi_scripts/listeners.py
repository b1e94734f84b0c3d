"""What listens while a one-node job runs: every TCP listener of the job's
processes, by owner. The ranks' own listeners must be on loopback only; the
launcher's (hydra's control port, and the PMI port of an embedded driver) are
reported separately (hydra cannot bind them to loopback)."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import psutil

from _harness import check, init_kwargs, ok, report

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
def pid():
    return os.getpid()


executors = set(ray.get([pid.remote() for _ in range(8)], timeout=30))
me = psutil.Process()
root = me
for parent in me.parents():          # up to the launcher, if there is one
    if parent.name() in ("mpiexec", "mpirun", "hydra_pmi_proxy", "mpiexec.hydra"):
        root = parent
job = {root} | set(root.children(recursive=True)) | set(me.children(recursive=True))
names = {p.pid: p.name() for p in job}
check(executors <= set(names), f"executors {executors} not found among {names}")

launcher_names = {"mpiexec", "mpirun", "hydra_pmi_proxy", "mpiexec.hydra"}
# A socket is often open in several processes (ranks inherit the launcher's):
# it is the launcher's when any launcher process has it.
by_socket = {}
for proc in job:
    try:
        conns = proc.net_connections(kind="tcp")
    except (psutil.Error, AttributeError):
        conns = proc.connections(kind="tcp")
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN:
            by_socket.setdefault((conn.laddr.ip, conn.laddr.port), set()).add(proc.name())
ranks_own, launchers = [], []
for (ip, port), owners in sorted(by_socket.items()):
    (launchers if owners & launcher_names else ranks_own).append(f"{ip}:{port}")
report("rank_listeners", ranks_own)
report("launcher_listeners", launchers)
exposed = [a for a in ranks_own if not a.startswith("127.")]
check(not exposed, f"ranks listen beyond loopback: {exposed}")
ray.shutdown()
ok("listeners")
