"""Starting and stopping the driver's side of a job (rank 0)."""
from __future__ import annotations

import logging
import os
import socket
import sys

from .. import _config
from . import launch
from ..exceptions import RayError
from . import context, node_watch, script_env, strays
from .driver import DriverContext
from .headloop import HeadLoop
from .head import Head

logger = logging.getLogger(__name__)

#: GIL switch interval on rank 0 (seconds); see start_driver.
SWITCH_INTERVAL = 0.0002


class Session:
    """What ``init()`` started on rank 0, and how to stop it."""

    def __init__(self, ctx: DriverContext, comm, inter, arena, embedded: bool,
                 job_id: str, session_id: str) -> None:
        self.ctx = ctx
        self.comm = comm
        self.inter = inter
        self.arena = arena
        self.embedded = embedded
        self.job_id = job_id
        self.session_id = session_id


def check_num_gpus(num_gpus) -> None:
    """``init(num_gpus=)``'s check, made before the worker ranks hear of a session."""
    visible = launch.visible_gpus()
    if num_gpus and visible and num_gpus > len(visible):
        raise ValueError(f"init(num_gpus={num_gpus}) but CUDA_VISIBLE_DEVICES="
                         f"{os.environ['CUDA_VISIBLE_DEVICES']!r} lists {len(visible)} "
                         f"GPU(s); pass num_gpus <= {len(visible)} or unset it")


def store_size(object_store_memory) -> int:
    """The store's size per node: ``init(object_store_memory=)``, else
    ``HPC_RAY_OBJECT_STORE_MEMORY``, else the default; checked, as Ray 0.7 does,
    before the worker ranks hear of a session (after that, an error must end
    them: ``start_driver``)."""
    if object_store_memory is None:
        size = _config.os_environ_get("OBJECT_STORE_MEMORY", None,
                                      _config.positive(_config.parse_bytes))
        if size is None:
            return int(min(2 << 30, (_memory_total() or 8 << 30) * 0.2))
        what = "HPC_RAY_OBJECT_STORE_MEMORY"
    else:
        if isinstance(object_store_memory, bool) \
                or not isinstance(object_store_memory, (int, float)) or object_store_memory < 1:
            raise ValueError(f"object_store_memory must be a number of bytes above 0, got "
                             f"{object_store_memory!r} (HPC_RAY_OBJECT_STORE_MEMORY also "
                             f"takes sizes such as '2GB')")
        size, what = int(object_store_memory), f"object_store_memory={object_store_memory!r}"
    total = _memory_total()
    if total is not None and size > total:
        raise ValueError(f"{what} asks for {size} bytes of store, more than this node's "
                         f"memory ({total} bytes)")
    return size


def _memory_total() -> int | None:
    """This node's memory in bytes (None if unknown)."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil.virtual_memory().total


def start_driver(num_cpus=None, num_gpus=None, resources=None,
                 object_store_memory=None, ranks_per_node=None) -> Session:
    """Start the head and the worker ranks; ``object_store_memory`` is ``store_size``'s."""
    check_num_gpus(num_gpus)
    MPI = launch.mpi()
    world = MPI.COMM_WORLD
    inter = None
    if world.Get_size() > 1:
        if world.Get_rank() != 0:
            raise RayError("start_driver() called on a worker rank")
        comm = world
        embedded = False
        cpus_per_rank = num_cpus
    else:
        n = int(num_cpus) if num_cpus is not None else (os.cpu_count() or 1)
        if n < 0:
            raise ValueError(f"num_cpus must be >= 0, got {num_cpus!r}")
        # num_cpus=0 (Ray's driver-only cluster): one worker that holds no CPU
        # runs the num_cpus=0 tasks and actors; nothing else can be placed.
        before = _children()
        embedded = True
        cpus_per_rank = 1 if n else 0
    try:
        if embedded:
            inter, comm = launch.spawn_workers(max(n, 1))
        return _start_head(comm, inter, embedded, cpus_per_rank, num_gpus, resources,
                           object_store_memory, ranks_per_node)
    except BaseException:
        # (Also a Ctrl-C, raised as the spawn returns.)
        # The worker ranks wait in the set-up for what will never come: end them.
        if not embedded:
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
            # (Past MPI_Init everywhere: these names are no longer needed, and an
            # aborted job would leave them.)
            launch.unlink_mapped_shm()
            launch.unlink_launcher_topology()
            comm.Abort(1)
        # (Another Ctrl-C is dropped until they are ended: a notebook user may
        # press twice, and what is raised here ends init() anyway.)
        import signal
        import threading
        main = threading.current_thread() is threading.main_thread()
        handler = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            _end_spawned(_children() - before)
        finally:
            if main:
                signal.signal(signal.SIGINT, handler)
        raise


def _start_head(comm, inter, embedded: bool, cpus_per_rank, num_gpus, resources,
                object_store_memory, ranks_per_node) -> Session:
    size = object_store_memory or store_size(None)
    rpn = ranks_per_node or _config.os_environ_get("RANKS_PER_NODE", None,
                                                   _config.positive(int))
    job_id = os.environ.get("SLURM_JOB_ID") or f"local-{os.getpid()}"
    cfg = {
        "ranks_per_node": rpn,
        "store_size": size,
        "sys_path": list(sys.path),
        "cwd": os.getcwd(),
        "driver_pid": os.getpid(),
        "driver_host": socket.gethostname(),
        "cpus_per_rank": cpus_per_rank,
        "num_gpus": num_gpus,
        "resources": dict(resources or {}),
        "embedded": embedded,
        "job_id": job_id,
        # Unique to this session: names the actors' sockets for direct calls.
        "session_id": f"{job_id}-{os.getpid()}-{os.urandom(4).hex()}",
        "pretouch": _config.os_environ_get("PRETOUCH", 128 << 20, _config.parse_bytes),
        "extra_idle": _config.os_environ_get("EXTRA_EXECUTOR_IDLE", None, float),
        "actor_standby": _config.os_environ_get("ACTOR_STANDBY", 1, int),
        "log_to_driver": context.log_to_driver,
        # The variables the script set or deleted before init(), for worker ranks
        # that never ran it (python -m hpc_ray; spawned ranks). None otherwise.
        "environ": script_env.changes(spawning=embedded),
    }
    cfg, node_of, node, arena, flags = launch.setup_world(comm, cfg)
    infos = comm.gather(None, root=0)
    hosts = [launch.node_name()] + [info[3] for info in infos[1:]]
    head = Head(comm.Get_size(), node_of, cfg["store_size"], hosts)
    for rank, info in enumerate(infos):
        if rank == 0:
            continue
        res, gpu_ids, pid, _host = info
        head.add_worker(rank, res, gpu_ids, pid)
    context.set_id_prefix(0, 0)
    context.reset_local_refs()
    # The comm thread and the driver thread hand the GIL back and forth on every
    # round trip; with the default 5 ms switch interval a woken driver thread can
    # wait that long for it (measured: 4 ms sync round trips instead of 0.3 ms).
    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
    loop = HeadLoop(comm, head, arena, cfg.get("session_id"), cfg["one_host"], flags)
    loop.watch = node_watch.for_job(cfg, node_of, hosts)
    loop.spawned = node_watch.spawned_watch(cfg, {r: w.pid for r, w in head.workers.items()})
    loop.start()
    ctx = DriverContext(head, loop, arena, node, 0, {"size": comm.Get_size()},
                        cfg.get("session_id"))
    ctx.job_id = job_id
    return Session(ctx, comm, inter, arena, embedded, job_id, cfg["session_id"])


def _children() -> set[int]:
    """The pids of this process's children (``_end_spawned``: which a spawn added)."""
    import psutil
    return {child.pid for child in psutil.Process().children()}


def _end_spawned(launcher: set[int]) -> None:
    """Kill the launcher an embedded spawn started (``launcher``: its pid) and
    every process under it, the worker ranks and their executors, when they can
    no longer be told to leave (a failed or interrupted set-up); MPI_Finalize is
    then left out, and no spawn made again (``spawned_lost``), as after a worker
    rank died: MPI would crash this process."""
    import psutil
    procs = []
    for pid in launcher:
        try:
            top = psutil.Process(pid)
            procs += [top] + top.children(recursive=True)
        except psutil.Error:
            pass
    # (Their MPI segments are named in /dev/shm: the killed cannot unlink them.)
    launch.unlink_mapped_shm(["self"] + [proc.pid for proc in procs])
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)
    if procs:
        launch.spawned_lost = ("init() failed or was interrupted while starting its worker "
                               "ranks, which were ended; start a new Python process (in "
                               "Jupyter: restart the kernel) to start them again")


def stop_driver(session: Session) -> None:
    session.ctx.shutdown()
    # Each rank ended what its tasks left running; a rank on this node that died
    # could not: its strays are ended here.
    strays.end(strays.session_prefix(session.session_id), prefix=True)
    if session.inter is not None and launch.spawned_lost is None:
        # Workers disconnect after SHUTDOWN; both sides must call it. After a
        # worker rank died the launcher has ended them all: no one to disconnect from.
        try:
            session.comm.Free()
            session.inter.Disconnect()
        except Exception as exc:  # pragma: no cover - MPI-specific
            logger.warning("disconnect from workers failed: %s", exc)
    session.arena.close()
