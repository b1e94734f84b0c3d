"""Start-up: decide each rank's role, set up the stores, and start the head or worker.

    mpiexec -n N python driver.py        rank 0 returns from init(); ranks 1.. serve
    mpiexec -n N python -m hpc_ray x.py  the same, but only rank 0 runs x.py
    python driver.py                     embedded: init() spawns num_cpus worker ranks
                                         (MPI.COMM_SELF.Spawn) and merges with them

Every rank then runs the same set-up, collectively on the job's communicator:

    rank 0 ──bcast(config)──▶ all      store size, sys.path, resources, driver pid,
                                       os.environ changes (script_env.py); a worker
                                       rank waits for it asleep (comm.patient_bcast)
    one host: rank 0's memfd sleep flags ──bcast(pid, fd)──▶ all open them
    all: node of each rank (shared-memory split and the launcher's node name,
         or HPC_RAY_RANKS_PER_NODE)
    node leader: memfd store ──bcast(pid, fd) on the node──▶ node ranks open it
    all ──gather(resources, GPUs, pid, node name)──▶ rank 0 builds the head
"""
from __future__ import annotations

import array
import contextlib
import fcntl
import logging
import os
import re
import shlex
import shutil
import socket
import stat
import sys
import termios

from .. import _config
from . import launched

logger = logging.getLogger(__name__)


def slurm_cpus_per_task() -> int | None:
    raw = os.environ.get("SLURM_CPUS_PER_TASK")
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def visible_gpus() -> list[int]:
    raw = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not raw or raw in ("NoDevFiles", "-1"):
        return []
    out = []
    for part in raw.split(","):
        try:
            out.append(int(part))
        except ValueError:
            pass
    return out


def node_gpus(proc_dir: str = "/proc/driver/nvidia/gpus", dev_dir: str = "/dev") -> list[int]:
    """The GPU ids this process may use: CUDA_VISIBLE_DEVICES where it is set,
    else every NVIDIA GPU of the machine, counted as Ray 0.7 counts them (the
    driver's /proc entries; the /dev/nvidiaN device files where a container
    hides /proc/driver), so that ``init()`` on a GPU node offers its GPUs."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return visible_gpus()
    try:
        return list(range(len(os.listdir(proc_dir))))
    except OSError:
        pass
    try:
        return list(range(sum(1 for f in os.listdir(dev_dir)
                              if re.fullmatch(r"nvidia\d+", f))))
    except OSError:
        return []


def _single_node() -> bool:
    """Whether this job's ranks all share one node, as far as the launcher says.

    A process started without a launcher (embedded mode) spawns its workers on
    this node. Unknown launchers count as several nodes.
    """
    env = os.environ
    pairs = (("MPI_LOCALNRANKS", "PMI_SIZE"),                          # MPICH's hydra
             ("OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_SIZE"))   # Open MPI
    for local, total in pairs:
        if local in env and total in env:
            return env[local] == env[total]
    if "SLURM_STEP_NUM_NODES" in env or "SLURM_NNODES" in env:
        return env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_NNODES")) == "1"
    return not launched.under_launcher()


def confine_network() -> None:
    """Keep the MPI library's own listening sockets off the network where it can.

    On one node ranks talk through shared memory; the TCP listeners the MPI
    library opens anyway (and uses for the workers an embedded driver spawns)
    are bound to loopback: ``UCX_NET_DEVICES=lo`` for MPICH's default UCX
    netmod (its shared-memory transports are unaffected), ``FI_TCP_IFACE=lo``
    for its libfabric netmod, ``OMPI_MCA_btl_tcp_if_include=lo`` for Open MPI.
    By default the MPICH wheel's ranks also listen on the host's external
    address. On several nodes ``HPC_RAY_NETWORK_IFACE`` names the interface for
    libfabric's and Open MPI's TCP (UCX sites set ``UCX_NET_DEVICES`` themselves).
    Called before MPI starts; a site's or user's own settings win.
    """
    env = os.environ
    iface = _config.os_environ_get("NETWORK_IFACE", None)
    if not iface and _single_node():
        iface = "lo"
        env.setdefault("UCX_NET_DEVICES", "lo")
    if iface:
        env.setdefault("FI_TCP_IFACE", iface)
        env.setdefault("FI_SOCKETS_IFACE", iface)
        env.setdefault("OMPI_MCA_btl_tcp_if_include", iface)


def mpi():
    """Import mpi4py.MPI (initialises MPI): only ranks, never executors, call this.

    A process that starts MPI without a launcher (an embedded driver) calls
    MPI_Finalize itself, at exit (``finalize_at_exit``), instead of mpi4py.
    """
    singleton = "mpi4py.MPI" not in sys.modules and not launched.under_launcher()
    if singleton:
        launched.drop_inherited()   # (a process a rank started is not one of its ranks)
    confine_network()
    import mpi4py
    mpi4py.rc.recv_mprobe = True
    if singleton:
        import atexit
        mpi4py.rc.finalize = False
        # Registered before init() registers shutdown(): runs after it.
        atexit.register(finalize_at_exit)
    from mpi4py import MPI
    return MPI


#: Embedded mode: why this process may neither spawn worker ranks nor call
#: MPI_Finalize any more (set by ``HeadLoop.ranks_lost``): a worker rank it
#: spawned died, and MPICH's launcher, which both talk to, ended with it (they
#: crash this process then: a segmentation fault).
spawned_lost: str | None = None


def finalize_at_exit() -> None:
    """MPI_Finalize, left out after a spawned worker rank died (``spawned_lost``:
    the interpreter then exits with the script's own status) and after SIGTERM
    (``interrupts.skip_finalize``: ``leave_without_finalize`` follows)."""
    from . import interrupts
    from mpi4py import MPI
    if spawned_lost is None and not interrupts.skip_finalize and not MPI.Is_finalized():
        MPI.Finalize()


def _launcher_dirs() -> list[str]:
    """Where an ``mpiexec`` matching this Python may be: beside the interpreter, in
    its environment's bin, where the ``mpich`` wheel put its scripts."""
    dirs = [os.path.dirname(sys.executable), os.path.join(sys.prefix, "bin")]
    try:
        from importlib.metadata import PackageNotFoundError, files
        try:
            for f in files("mpich") or ():
                if f.name == "mpiexec":
                    dirs.append(os.path.dirname(os.path.abspath(f.locate())))
        except PackageNotFoundError:
            pass
    except ImportError:  # pragma: no cover - Python < 3.8
        pass
    return list(dict.fromkeys(dirs))


def find_launcher() -> str | None:
    """The ``mpiexec`` to use: on ``PATH``, else the one beside this interpreter."""
    on_path = shutil.which("mpiexec")
    if on_path:
        return on_path
    for d in _launcher_dirs():
        candidate = os.path.join(d, "mpiexec")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _spawn_launcher(MPI, n: int) -> str | None:
    """The ``mpiexec`` MPICH's singleton spawn is to run: ``HPC_RAY_MPIEXEC``, else
    the one on ``PATH``, else the one beside the interpreter (a driver started as
    ``/path/to/venv/bin/python driver.py`` has no venv bin on ``PATH``), put first
    on ``PATH`` (its ``hydra_pmi_proxy`` is beside it). Without one MPICH aborts
    yet never exits (and leaves its /dev/shm segment), and with Open MPI's it
    waits for good: fail now, saying what to do."""
    from ..exceptions import RayError
    from .launched import mpi_flavor
    chosen = _config.os_environ_get("MPIEXEC", None)
    found = shutil.which(chosen) if chosen else shutil.which("mpiexec") or find_launcher()
    if chosen and found is None:
        raise RayError(f"HPC_RAY_MPIEXEC={chosen!r}: no such program")
    if "MPICH" not in MPI.Get_library_version():
        return found  # other MPIs spawn without a launcher on PATH (or fail with an error)
    if found is None:
        raise RayError(
            f"cannot start worker processes: MPICH needs its 'mpiexec' on PATH to spawn "
            f"them, and none is on PATH or beside this Python ({sys.executable}). Activate "
            f"the environment that has the 'mpich' package (source <venv>/bin/activate), "
            f"add its bin directory to PATH, or start the job with `mpiexec -n {n + 1} "
            f"{sys.executable} -m hpc_ray your_script.py`.")
    if mpi_flavor(found) == "openmpi":
        raise RayError(
            f"cannot start worker processes: the MPI library is MPICH, but {found} is Open "
            f"MPI's mpiexec, which cannot start MPICH's ranks. Set HPC_RAY_MPIEXEC to "
            f"MPICH's mpiexec (for the 'mpich' package: the one in its environment's bin), "
            f"or put it first on PATH.")
    if shutil.which("mpiexec") != found:
        os.environ["PATH"] = os.path.dirname(found) + os.pathsep + os.environ.get("PATH", "")
    return found


#: The file ``HWLOC_XMLFILE`` names for the launcher of a spawn: none exists.
NO_TOPOLOGY_FILE = "hpc_ray-no-topology-file.xml"


@contextlib.contextmanager
def _launcher_in_own_session(real: str | None):
    """Run the launcher that MPICH's singleton spawn starts in a session of its own.

    It is started from ``PATH`` as a child of this driver, so it shares the
    terminal's process group: a Ctrl-C would reach it, and hydra answers one
    by killing every process of the job, the driver included (SIGKILL). A
    wrapper named ``mpiexec``, first on ``PATH`` only while the spawn runs,
    execs the real one under ``setsid``; the wrapper is deleted at once (the
    launcher has exec'd by the time the spawn returns).

    The launcher dies with the driver (SIGKILL), so it cannot clean up after
    itself: hydra's copy of the node's topology (``/tmp/hydra_hwloc_xmlfile_*``,
    for its ranks to read) stayed behind after every killed driver. Hydra makes
    no such file where ``HWLOC_XMLFILE`` is set, and hwloc discovers the
    topology itself where that file does not exist, so the wrapper names one
    that never exists (``NO_TOPOLOGY_FILE``); the spawned ranks drop it from
    their environment before MPI starts (``spawned.py``).
    """
    setsid = shutil.which("setsid")
    if real is None or setsid is None:
        yield
        return
    import tempfile
    tmp = tempfile.mkdtemp(prefix="hpc_ray-launch-")
    wrapper = os.path.join(tmp, "mpiexec")
    topology = "" if "HWLOC_XMLFILE" in os.environ else \
        f"HWLOC_XMLFILE={shlex.quote(os.path.join(tmp, NO_TOPOLOGY_FILE))} "
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\n{topology}exec {shlex.quote(setsid)} {shlex.quote(real)} \"$@\"\n")
    os.chmod(wrapper, 0o700)
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = tmp + os.pathsep + old_path
    try:
        yield
    finally:
        os.environ["PATH"] = old_path
        shutil.rmtree(tmp, ignore_errors=True)


def spawn_workers(n: int):
    """Embedded mode: start ``n`` worker ranks and merge them with this process."""
    MPI = mpi()
    if spawned_lost is not None:
        from ..exceptions import RayError
        raise RayError(f"cannot start worker ranks in this process again: {spawned_lost}")
    launcher = _spawn_launcher(MPI, n)
    try:
        with _launcher_in_own_session(launcher):
            inter = MPI.COMM_SELF.Spawn(sys.executable,
                                        args=["-m", "hpc_ray.runtime.spawned"], maxprocs=n)
    except MPI.Exception as exc:
        from ..exceptions import RayError
        # Open MPI's singleton (as root) has made its sm_segment.* in /dev/shm and
        # would leave it there: no worker will ever attach to it now.
        unlink_mapped_shm()
        raise RayError(
            f"could not start {n} worker processes with MPI_Comm_spawn ({exc}). "
            f"Spawning needs an MPI that supports it as this user (the 'mpich' wheel "
            f"does; Open MPI's singleton spawn fails as root). Alternatively start "
            f"the job with `mpiexec -n {n + 1} python -m hpc_ray your_script.py`.") from exc
    return inter, inter.Merge(high=False)


def setup_world(comm, cfg: dict | None):
    """Collective set-up on ``comm``; rank 0 passes ``cfg``, others receive it."""
    from ..transport.comm import patient_bcast
    from . import script_env
    from .store import Arena
    rank = comm.Get_rank()
    size = comm.Get_size()
    cfg = patient_bcast(comm, cfg)
    if cfg is None:
        return None   # rank 0 starts no session (``release_workers``)
    if rank:   # python -m hpc_ray: what the script set in os.environ before init()
        script_env.apply(cfg.get("environ"))
    gathered = comm.allgather((node_gpus(), socket.gethostname()))
    rpn = cfg.get("ranks_per_node")
    node_of = [r // rpn for r in range(size)] if rpn else \
        _nodes_of_ranks(comm, by_name=not cfg.get("embedded"))
    cfg = dict(cfg, visible_gpus=[g for g, _ in gathered],
               one_host=len({host for _, host in gathered}) == 1)
    if not rpn and len(set(node_of)) > 1:
        # Nodes the launcher made (several slurmd, or hydra hosts, on one
        # machine) share nothing a node of its own would not: the names of the
        # abstract sockets (doorbells, actors' direct-call listeners) are per
        # node, so that a caller on another node takes the head's route over
        # MPI as it must between hosts, no sleep flags span the nodes, and
        # the driver's process is another host's to a rank on another node.
        # (HPC_RAY_RANKS_PER_NODE's pretend nodes keep the one-host shortcuts.)
        if cfg.get("session_id"):
            cfg["session_id"] = f"{cfg['session_id']}-node{node_of[rank]}"
        if node_of[rank] != node_of[0]:
            cfg["driver_host"] = None
        cfg["one_host"] = False
    flags = _sleep_flags(comm) if cfg["one_host"] else None
    node = node_of[rank]
    node_comm = comm.Split(color=node, key=rank)
    store_size = cfg["store_size"]
    if node_comm.Get_rank() == 0:
        arena = Arena.create(store_size)
        node_comm.bcast((os.getpid(), arena.fd), root=0)
        arena.pretouch_in_background(min(store_size, cfg.get("pretouch", 128 << 20)))
    else:
        pid, fd = node_comm.bcast(None, root=0)
        arena = Arena.open(pid, fd, store_size)
    # Every rank of the node has opened the store: the leader may now exit first.
    node_comm.Barrier()
    node_comm.Free()
    comm.Barrier()
    unlink_mapped_shm()
    unlink_launcher_topology()
    cfg["node_of"] = node_of
    return cfg, node_of, node, arena, flags


def node_name() -> str:
    """This rank's node as the launcher names it.

    Slurm's node name first (several ``slurmd -N`` may share one host), then
    hydra's host for the proxy that started the rank (``-hosts``), then the host
    name. Hydra's ``localhost`` (``-hosts localhost``) is this host.
    """
    env = os.environ
    name = env.get("SLURMD_NODENAME") or env.get("PMI_HOSTNAME") or ""
    if name in ("", "localhost", "127.0.0.1", "::1"):
        name = socket.gethostname()
    return name


def _nodes_of_ranks(comm, by_name: bool = True) -> list[int]:
    """The node index of every rank (collective): ranks share a node when MPI puts
    them in one shared-memory group and the launcher gives them one node name.

    Either alone can be wrong for the runtime: an MPI library may group by host
    the ranks of two ``slurmd`` on one machine, and two hosts may share a name.
    Ranks an embedded driver spawned are on its node whatever their launcher
    calls it (``by_name=False``). Node 0 holds rank 0; nodes are numbered by
    their lowest rank.
    """
    MPI = mpi()
    rank = comm.Get_rank()
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    name = node_name() if by_name else ""
    names = sorted(set(shared.allgather(name)))
    same_name = shared.Split(color=names.index(name), key=rank)
    leader = same_name.bcast(rank, root=0)
    same_name.Free()
    shared.Free()
    leaders = comm.allgather(leader)
    index = {ld: i for i, ld in enumerate(sorted(set(leaders)))}
    return [index[ld] for ld in leaders]


def _sleep_flags(comm):
    """The job's ``comm.SleepFlags`` (collective; every rank on one host), or
    None on every rank if any rank could not map them."""
    from ..transport.comm import SleepFlags
    size = comm.Get_size()
    flags = None
    if comm.Get_rank() == 0:
        try:
            flags, fd = SleepFlags.create(size)
            where = (os.getpid(), fd)
        except (OSError, AttributeError):   # no memfd here
            where = None
        comm.bcast(where, root=0)
    else:
        where = comm.bcast(None, root=0)
        if where is not None:
            try:
                flags = SleepFlags.open(where[0], where[1], size)
            except OSError:                 # /proc closed to us
                flags = None
    everyone = all(comm.allgather(flags is not None))
    if comm.Get_rank() == 0 and where is not None:
        os.close(where[1])   # every rank has opened it (the allgather)
    if not everyone and flags is not None:
        flags.close()
        flags = None
    return flags


def unlink_mapped_shm(pids=("self",)) -> None:
    """Unlink the /dev/shm files ``pids`` have mapped (the MPI library's own).

    Every rank of the job attached to them during MPI_Init, so the names are no
    longer needed; unlinked now, the memory goes back to the kernel when the job
    ends, even if it is killed (MPICH leaves its segment behind otherwise).
    """
    paths = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                paths.update(line.split(None, 5)[5].strip() for line in f
                             if "/dev/shm/" in line and len(line.split(None, 5)) == 6)
        except OSError:
            pass
    for path in paths:
        if path.startswith("/dev/shm/") and not path.endswith("(deleted)"):
            try:
                os.unlink(path)
            except OSError:
                pass


#: The name hydra (MPICH's launcher) gives its copy of the node's topology in /tmp.
HYDRA_TOPOLOGY_PREFIX = "hydra_hwloc_xmlfile_"


def unlink_launcher_topology(proxy: int | None = None) -> None:
    """Unlink hydra's copy of the node's topology that this rank's launcher
    process (its parent, a ``hydra_pmi_proxy``; or the process ``proxy``) holds open.

    The ranks read it in MPI_Init; every rank is past that at the world barrier.
    A proxy that ends on its error path (a rank of its node, or another node,
    killed) leaves the file in /tmp; unlinked now, it goes with the proxy.
    """
    fd_dir = f"/proc/{proxy or os.getppid()}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return
    for fd in fds:
        try:
            path = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if os.path.basename(path).startswith(HYDRA_TOPOLOGY_PREFIX) and \
                not path.endswith("(deleted)"):
            try:
                os.unlink(path)
            except OSError:
                pass


def worker_resources(cfg: dict, rank: int, size: int) -> tuple[dict, list[int]]:
    res = dict(cfg.get("resources") or {})
    cpus = cfg.get("cpus_per_rank")
    if cpus is None:
        cpus = slurm_cpus_per_task() or 1
    res["CPU"] = cpus
    gpus_total = cfg.get("num_gpus")
    if gpus_total is not None:
        # init(num_gpus=G): the node has G GPUs (embedded: the driver's machine);
        # its worker ranks split them round-robin, so each id is handed out once
        # per node. The ids are the first G of CUDA_VISIBLE_DEVICES where it is
        # set (the driver's, embedded; each rank's own under a launcher), as in Ray.
        embedded = cfg.get("embedded")
        visible = cfg["visible_gpus"][0 if embedded else rank]
        # (More than the machine has: the user's count stands, ids 0..G-1, as in Ray.)
        ids = visible[:int(gpus_total)] if len(visible) >= gpus_total \
            else list(range(int(gpus_total)))
        node_of = cfg["node_of"]
        peers = [r for r in range(1, size) if embedded or node_of[r] == node_of[rank]]
        index = peers.index(rank)
        gpu_ids = [g for i, g in enumerate(ids) if i % len(peers) == index]
    else:
        gpu_ids = _my_share_of_node_gpus(cfg, rank)
    res["GPU"] = len(gpu_ids)
    return res, gpu_ids


def _my_share_of_node_gpus(cfg: dict, rank: int) -> list[int]:
    """The GPUs this worker rank may use.

    When the launcher bound GPUs per task (``srun --gpus-per-task``), each rank
    sees its own. When every rank of a node sees the same list (``mpiexec`` in
    an allocation with ``--gpus-per-node``), the node's worker ranks split it
    round-robin instead of all claiming every GPU.
    """
    visible = cfg["visible_gpus"]
    node_of = cfg["node_of"]
    mine = visible[rank]
    peers = [r for r in range(1, len(visible)) if node_of[r] == node_of[rank]]
    if not mine or any(visible[r] != mine for r in peers):
        return mine
    index = peers.index(rank)
    return [g for i, g in enumerate(mine) if i % len(peers) == index]


def run_worker(comm) -> bool:
    """The whole life of a worker rank; returns True when the driver vanished."""
    from . import interrupts
    from .worker import WorkerLoop
    # Slurm's USR1 warning is for the driver; on a worker its default action kills.
    ignore_preempt_signals()
    interrupts.dump_stacks_on_sigusr2()
    world = setup_world(comm, None)
    if world is None:
        return False
    cfg, node_of, node, arena, flags = world
    rank = comm.Get_rank()
    resources, gpu_ids = worker_resources(cfg, rank, comm.Get_size())
    cfg["resources"] = resources
    comm.gather((resources, gpu_ids, os.getpid(), node_name()), root=0)
    loop = WorkerLoop(comm, rank, node, arena, cfg, flags)
    try:
        loop.run()
        return loop.driver_gone
    except BaseException:
        import traceback
        abort_job(comm, f"### hpc_ray worker rank {rank} of {comm.Get_size()} on "
                        f"{socket.gethostname()} failed:\n{traceback.format_exc()}")
    finally:
        arena.close()


#: Seconds ``abort_job`` waits at most for the launcher to read its message.
ABORT_DRAIN = 2.0


def abort_job(comm, message: str) -> None:
    """Write ``message`` to stderr, then end the job with ``MPI_Abort``.

    Hydra's mpiexec exits as soon as the abort reaches it, dropping whatever its
    proxy had not yet read from the rank's stderr pipe: under load the message
    was lost about one time in five. The proxy sends what it reads upstream at
    once, on the same socket as the abort, so while stderr is a pipe this waits
    (``ABORT_DRAIN`` s at most) until the pipe is empty.
    """
    sys.stderr.write(message)
    sys.stderr.flush()
    _wait_read(sys.stderr, ABORT_DRAIN)
    comm.Abort(1)


def _wait_read(stream, timeout: float) -> None:
    """Wait until the pipe ``stream`` writes to holds no unread bytes (or ``timeout``)."""
    from ..transport.wait import WaitTimeout, wait_until
    try:
        fd = stream.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
        unread = array.array("i", [0])

        def read() -> bool:
            fcntl.ioctl(fd, termios.FIONREAD, unread)
            return unread[0] == 0
        wait_until(read, timeout=timeout, what="the launcher to read stderr")
    except (OSError, ValueError, AttributeError, WaitTimeout):   # no pipe, closed, or slow
        pass


def release_workers(comm) -> None:
    """Rank 0 starts no session after all: the ranks waiting in ``run_worker`` leave."""
    from ..transport.comm import patient_bcast
    patient_bcast(comm, None)


def worker_exit(driver_gone: bool = False) -> None:
    """A worker rank is done: flush and leave without returning into user code."""
    sys.stdout.flush()
    sys.stderr.flush()
    if driver_gone:
        os._exit(0)  # no Finalize: it would wait for a peer that is gone
    # A normal interpreter exit, not os._exit: MPICH's process manager treats a
    # process that leaves with os._exit after MPI_Finalize as failed and kills
    # the whole process group, the driver's included (seen with the mpich wheel).
    raise SystemExit(0)


def ignore_preempt_signals() -> None:
    """Make this process (and the processes it starts) ignore SIGUSR1.

    For worker ranks: an ``scancel --signal=USR1`` or a ``--signal=USR1@N``
    without ``B:`` reaches every rank, and SIGUSR1's default action kills.
    An ignored signal stays ignored across ``exec``, so executors started
    afterwards ignore it too.
    """
    import signal
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
