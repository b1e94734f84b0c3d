"""Write, submit and follow Slurm batch jobs that run hpc_ray drivers.

::

    login node                                              Slurm
    JobSpec ──render_script()──▶ sbatch script ──submit()──┬─▶ pyslurm (importable and
                                                            │   built for this Slurm)
                                                            └─▶ `sbatch --parsable` (default)
    job_records() ◀── `scontrol -o show job ID` (state, exit code, output path)
    follow()      ◀── polls job_records() with back-off, tails the output file(s)
    cancel()      ──▶ `scancel ID`;  queue() ◀── `squeue -u $USER`

Both submission paths give the same job and the same errors: Slurm's rejection
text is classified (:class:`InvalidPartitionError`, :class:`InvalidAccountError`,
:class:`SubmissionError`) and passed through in the message.  pyslurm on PyPI is
built for the newest Slurm releases only (Debian 12 ships 22.05), so most sites
get the ``sbatch`` path; ``HPC_RAY_SLURM_SUBMIT=sbatch`` forces it.
"""
from __future__ import annotations

import codecs
import dataclasses
import getpass
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from . import _config

__all__ = [
    "SlurmError", "SlurmNotFoundError", "SlurmCommandError", "SlurmUnavailableError",
    "SubmissionError", "InvalidPartitionError", "InvalidAccountError",
    "DriverNotFoundError", "TimeFormatError", "JobNotFoundError",
    "JobSpec", "Submission", "JobEnd", "parse_time_limit", "render_script",
    "submission_path", "submit", "submit_script", "job_records", "queue", "cancel",
    "follow", "output_paths", "FINISHED_STATES",
]

#: Seconds a Slurm command may take before we give up on it (a hung slurmctld).
COMMAND_TIMEOUT = 60.0
#: Longest pause between two polls of a job's state in follow(): the delay a
#: user sees between the job's end and the prompt, against load on slurmctld.
FOLLOW_MAX_POLL = 1.0
#: Job states after which a job never runs again.
FINISHED_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
    "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})


# --- errors -------------------------------------------------------------------


class SlurmError(Exception):
    """Base of every error from hpc_ray's Slurm support.

    The message is complete by itself (what happened, Slurm's own words where
    there are some, and what to do), so the CLI shows it without a traceback.
    Fields live in ``args`` so errors pickle.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class SlurmNotFoundError(SlurmError):
    """There is no Slurm on this machine (no ``sbatch``, no usable pyslurm)."""


class SlurmCommandError(SlurmError):
    """A Slurm command failed; ``slurm_message`` holds what Slurm printed."""

    def __init__(self, message: str, slurm_message: str = "") -> None:
        super().__init__(message, slurm_message)

    @property
    def slurm_message(self) -> str:
        return self.args[1]


class SlurmUnavailableError(SlurmCommandError):
    """Slurm is installed, but not configured here or its controller does not answer."""


class SubmissionError(SlurmCommandError):
    """Slurm rejected the job."""


class InvalidPartitionError(SubmissionError):
    """The requested partition does not exist (or this user may not use it)."""


class InvalidAccountError(SubmissionError):
    """The requested account does not exist (or may not use this partition)."""


class DriverNotFoundError(SlurmError):
    """The driver script to submit does not exist."""


class TimeFormatError(SlurmError, ValueError):
    """A time limit that is not in one of Slurm's formats."""


class JobNotFoundError(SlurmError):
    """Slurm does not know this job id (never existed, or forgotten after MinJobAge)."""


# --- time limits ---------------------------------------------------------------

_TIME_FORMATS = ("minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS "
                 "(for example 30, 1:00:00, 2-12:00:00)")
_TIME_RE = re.compile(r"^(?:(?P<d>\d+)-(?P<dh>\d{1,2})(?::(?P<dm>\d{1,2})(?::(?P<ds>\d{1,2}))?)?"
                      r"|(?P<h>\d+):(?P<hm>\d{1,2}):(?P<hs>\d{1,2})"
                      r"|(?P<m>\d+)(?::(?P<ms>\d{1,2}))?)$")


def parse_time_limit(text: str) -> int | None:
    """Seconds in a Slurm time limit, or None for ``UNLIMITED``/``INFINITE``.

    Raises:
        TimeFormatError: not one of Slurm's formats, or minutes/seconds >= 60,
            hours >= 24 after a day count.
    """
    s = str(text).strip()
    if s.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME_RE.match(s)

    def bad(why: str = "") -> TimeFormatError:
        return TimeFormatError(f"time limit {text!r} is not a Slurm time{why}: use {_TIME_FORMATS}")
    if not m:
        raise bad()
    g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if any(g.get(k, 0) >= 60 for k in ("dm", "ds", "hm", "hs", "ms")):
        raise bad(" (minutes and seconds must be below 60)")
    if g.get("dh", 0) >= 24:
        raise bad(" (hours after a day count must be below 24)")
    if "d" in g:
        return ((g["d"] * 24 + g["dh"]) * 60 + g.get("dm", 0)) * 60 + g.get("ds", 0)
    if "h" in g:
        return (g["h"] * 60 + g["hm"]) * 60 + g["hs"]
    return g["m"] * 60 + g.get("ms", 0)


# --- the batch script ------------------------------------------------------------


@dataclasses.dataclass
class JobSpec:
    """What ``hpc-ray submit`` asks of Slurm; ``None`` leaves Slurm's default."""

    driver: str                               #: the driver script (must exist)
    args: tuple[str, ...] = ()                #: the driver's own arguments
    module: bool = False                      #: driver is a module name (python -m)
    nodes: int | None = None
    ntasks: int | None = None                 #: total ranks (instead of, or with, per node)
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    time: str | None = None                   #: a Slurm time limit
    partition: str | None = None
    account: str | None = None
    job_name: str | None = None               #: default: hpc_ray-<driver stem>
    output: str | None = None                 #: default: %x-%j.out in the submit dir
    setup: tuple[str, ...] = ()               #: shell lines before the launch
    requeue: bool = False                     #: requeue after a checkpoint on USR1
    launcher: str = "srun"                    #: "srun" or "mpiexec"
    srun_mpi: str | None = None               #: srun --mpi=...; None: site default
    python: str = sys.executable              #: interpreter on the compute nodes
    warning_seconds: int = 120                #: USR1 this long before the time limit
    sbatch_options: tuple[str, ...] = ()      #: more #SBATCH lines, e.g. "--mem=4G"

    def check(self) -> None:
        """Raise the errors a user can fix before anything reaches Slurm."""
        if not self.module and not Path(self.driver).is_file():
            raise DriverNotFoundError(
                f"driver file {self.driver!r} does not exist "
                f"(looked in {os.getcwd()}); give the path to your hpc_ray script")
        if self.time is not None:
            parse_time_limit(self.time)
        for name in ("nodes", "ntasks", "ntasks_per_node", "cpus_per_task"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise SlurmError(f"{name.replace('_', '-')} must be >= 1, got {value!r}")
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            raise SlurmError(f"gpus-per-node must be >= 0, got {self.gpus_per_node!r}")
        if self.launcher not in ("srun", "mpiexec"):
            raise SlurmError(f"launcher must be 'srun' or 'mpiexec', got {self.launcher!r}")


def _sbatch_line(option: str) -> str:
    # sbatch splits #SBATCH lines at blanks unless the value is in double quotes.
    flag, eq, value = option.partition("=")
    if eq and re.search(r"\s", value) and '"' not in value:
        option = f'{flag}="{value}"'
    return f"#SBATCH {option}"


def _directives(spec: JobSpec) -> list[str]:
    stem = spec.driver.rpartition(".")[2] if spec.module else Path(spec.driver).stem
    name = spec.job_name or "hpc_ray-" + re.sub(r"\s+", "_", stem)
    opts = [f"--job-name={name}"]
    for flag, value in (("nodes", spec.nodes), ("ntasks", spec.ntasks),
                        ("ntasks-per-node", spec.ntasks_per_node),
                        ("cpus-per-task", spec.cpus_per_task),
                        ("gpus-per-node", spec.gpus_per_node or None),
                        ("time", spec.time), ("partition", spec.partition),
                        ("account", spec.account)):
        if value is not None:
            opts.append(f"--{flag}={value}")
    opts.append(f"--output={spec.output or '%x-%j.out'}")
    opts.append(f"--signal=B:USR1@{spec.warning_seconds}")
    if spec.requeue:
        opts += ["--requeue", "--open-mode=append"]
    opts += list(spec.sbatch_options)
    return [_sbatch_line(o) for o in opts]


#: srun's option that ends the whole step when one task exits non-zero or is
#: killed, naming it (``srun: error: n2: task 3: Killed``; a task is a rank):
#: without it, the other ranks of a job whose rank the OOM killer took would
#: wait on it until the job's time limit (MPI tells them nothing). A node lost
#: with its slurmstepd reports nothing to srun until slurmctld declares it down
#: (SlurmdTimeout); rank 0's ``runtime/node_watch.py`` ends that job first.
KILL_ON_BAD_EXIT = "--kill-on-bad-exit=1"


def render_script(spec: JobSpec) -> str:
    """The sbatch script for ``spec``: #SBATCH lines, set-up, launch, USR1 forwarding."""
    # A module is looked up from the job's working directory, the submit directory.
    program = ["-m", spec.driver] if spec.module else [str(Path(spec.driver).resolve())]
    rank_cmd = " ".join(shlex.quote(a) for a in (spec.python, "-m", "hpc_ray", *program,
                                                 *spec.args))
    if spec.launcher == "srun":
        mpi = f" --mpi={spec.srun_mpi}" if spec.srun_mpi else ""
        launch = f"srun {KILL_ON_BAD_EXIT}{mpi} {rank_cmd}"
    else:
        launch = f'mpiexec -n "$SLURM_NTASKS" {rank_cmd}'
    lines = ["#!/bin/bash",
             "# Written by `hpc-ray submit`; submit it again with: sbatch <this file>",
             *_directives(spec), ""]
    if spec.setup:
        lines += ["# Set-up (--setup)", *spec.setup, ""]
    if spec.cpus_per_task:
        lines += ["# srun (Slurm >= 22.05) no longer inherits --cpus-per-task from sbatch.",
                  'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"', ""]
    lines += [
        "# hpc_ray.init() writes the driver's pid here; USR1 goes to the driver alone.",
        'export HPC_RAY_DRIVER_PIDFILE="${TMPDIR:-/tmp}/hpc_ray-$SLURM_JOB_ID.driver.pid"',
        "preempted=0",
        "forward_usr1() {",
        "    preempted=1",
        '    echo "hpc_ray: Slurm warns job $SLURM_JOB_ID of its end; telling the driver" >&2',
        '    [ -s "$HPC_RAY_DRIVER_PIDFILE" ] && kill -USR1 $(cat "$HPC_RAY_DRIVER_PIDFILE")',
        "}",
        "trap forward_usr1 USR1",
        "",
        "# In the background, so that the trap runs while the job does.",
        f"{launch} &",
        "launcher=$!",
        "# wait returns early when a trapped signal arrives; wait until the launcher ends.",
        'while :; do wait "$launcher"; rc=$?; kill -0 "$launcher" 2>/dev/null || break; done',
        'rm -f "$HPC_RAY_DRIVER_PIDFILE"',
    ]
    if spec.requeue:
        lines += [
            "# The driver checkpointed and stopped: requeue; the new run resumes.",
            'if [ "$preempted" = 1 ] && [ "$rc" = 0 ]; then',
            '    echo "hpc_ray: requeueing job $SLURM_JOB_ID" >&2',
            '    scontrol requeue "$SLURM_JOB_ID"',
            "fi",
        ]
    lines.append('exit "$rc"')
    return "\n".join(lines) + "\n"


# --- running Slurm commands ------------------------------------------------------


_NO_SLURM = ("no Slurm on this machine: the {cmd!r} command is not on PATH. Run this on "
             "a login node of a Slurm cluster (or `module load slurm` first); without "
             "Slurm, start a job with `hpc-ray run -n N driver.py`.")
_UNREACHABLE = ("Could not establish a configuration source", "Unable to contact slurm",
                "Unable to process configuration file",
                "Unable to establish controller machine", "Zero Bytes were transmitted",
                "Communication connection failure", "Socket timed out")


def _run(argv: list[str], *, input: str | None = None, cwd: str | None = None,
         timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess:
    exe = shutil.which(argv[0])
    if exe is None:
        raise SlurmNotFoundError(_NO_SLURM.format(cmd=argv[0]))
    try:
        return subprocess.run([exe, *argv[1:]], input=input, cwd=cwd, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SlurmUnavailableError(
            f"`{' '.join(argv)}` did not answer within {timeout:.0f}s: is slurmctld up? "
            "(try `scontrol ping`)") from None


def _failed(argv: list[str], proc: subprocess.CompletedProcess,
            cls: type[SlurmCommandError] = SlurmCommandError) -> SlurmCommandError:
    said = (proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}")
    if any(s in said for s in _UNREACHABLE):
        return SlurmUnavailableError(
            f"Slurm is installed here but not usable: {said}\n"
            "Check SLURM_CONF and that slurmctld is up (`scontrol ping`).", said)
    return cls(f"`{' '.join(argv)}` failed: {said}", said)


def slurm_version() -> tuple[int, int] | None:
    """(major, minor) of the installed Slurm, from ``sbatch --version``; None if absent."""
    if shutil.which("sbatch") is None:
        return None
    out = _run(["sbatch", "--version"]).stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def submission_path() -> tuple[str, str]:
    """``("pyslurm" | "sbatch", why)``: which way :func:`submit` sends jobs here."""
    choice = _config.os_environ_get("SLURM_SUBMIT", "auto").lower()
    if choice == "sbatch":
        return "sbatch", "HPC_RAY_SLURM_SUBMIT=sbatch"
    try:
        import pyslurm  # noqa: F401 -- optional; links against one libslurm version
    except Exception as exc:  # ImportError, or OSError from a missing libslurm
        return "sbatch", f"pyslurm is not importable ({type(exc).__name__}: {exc})"
    version = getattr(pyslurm, "__version__", "")
    m = re.match(r"(\d+)\.(\d+)", version)
    built_for = (int(m.group(1)), int(m.group(2))) if m else None
    installed = slurm_version()
    if built_for is None or (installed is not None and built_for != installed):
        have = "%d.%02d" % installed if installed else "unknown"
        want = "%d.%02d" % built_for if built_for else "unknown"
        return "sbatch", (f"pyslurm {version} is built for Slurm {want}, "
                          f"this machine runs Slurm {have}")
    return "pyslurm", f"pyslurm {version} matches the installed Slurm"


def _classify(said: str, spec: JobSpec | None) -> SubmissionError:
    """One error class per kind of rejection, whichever path reported it."""
    partition = spec.partition if spec else None
    account = spec.account if spec else None
    if "Invalid partition" in said or "invalid partition" in said:
        known = _partitions()
        return InvalidPartitionError(
            f"Slurm rejected the job: partition {partition!r} does not exist"
            + (f" (partitions here: {', '.join(known)})" if known else "")
            + f".\nSlurm said: {said}", said)
    if "Invalid account" in said:
        return InvalidAccountError(
            f"Slurm rejected the job: account {account!r} does not exist or may not "
            "use this partition; list yours with `sacctmgr show assoc user=$USER "
            f"format=account,partition`.\nSlurm said: {said}", said)
    return SubmissionError(f"Slurm rejected the job.\nSlurm said: {said}", said)


def _partitions() -> list[str]:
    try:
        proc = _run(["sinfo", "-h", "-o", "%R"])
    except SlurmError:
        return []
    return sorted(set(proc.stdout.split())) if proc.returncode == 0 else []


@dataclasses.dataclass(frozen=True)
class Submission:
    job_id: int     #: Slurm's job id
    via: str        #: "sbatch" or "pyslurm"
    notes: str = ""  #: warnings Slurm printed while accepting the job


def submit_script(script: str, *, cwd: str | None = None,
                  spec: JobSpec | None = None) -> Submission:
    """Submit a batch script's text, run from ``cwd``; return the job id.

    Raises:
        SlurmNotFoundError: no Slurm here.
        InvalidPartitionError, InvalidAccountError, SubmissionError: Slurm said no.
        SlurmUnavailableError: Slurm is installed but not reachable.
    """
    cwd = cwd or os.getcwd()
    path, _ = submission_path()
    if path == "pyslurm":
        return _submit_pyslurm(script, cwd, spec)
    argv = ["sbatch", "--parsable"]
    proc = _run(argv, input=script, cwd=cwd)
    if proc.returncode != 0:
        err = _failed(argv, proc)
        raise err if isinstance(err, SlurmUnavailableError) else _classify(err.slurm_message, spec)
    job = proc.stdout.strip().split(";")[0]
    return Submission(int(job), "sbatch", proc.stderr.strip())


def _submit_pyslurm(script: str, cwd: str, spec: JobSpec | None) -> Submission:
    import pyslurm
    desc = pyslurm.JobSubmitDescription(script=script, working_directory=cwd)
    desc.load_sbatch_options()
    try:
        job = desc.submit()
    except Exception as exc:  # pyslurm.RPCError carries slurm_strerror's text
        said = f"Batch job submission failed: {exc}"
        if any(s in said for s in _UNREACHABLE):
            raise SlurmUnavailableError(f"Slurm is installed here but not usable: {said}",
                                        said) from None
        raise _classify(said, spec) from None
    return Submission(int(job), "pyslurm")


def submit(spec: JobSpec) -> Submission:
    """Check ``spec``, write its script and submit it from the current directory."""
    spec.check()
    return submit_script(render_script(spec), spec=spec)


# --- jobs -----------------------------------------------------------------------

_JOB_ID_RE = re.compile(r"^\d+([_+]\d+)?$")
_FIELD_RE = re.compile(r"(?:^| )([A-Za-z][\w/:]*)=")


def _check_job_id(job_id: str | int) -> str:
    job = str(job_id).strip()
    if not _JOB_ID_RE.match(job):
        raise SlurmError(f"{job_id!r} is not a Slurm job id (expected a number like 1234 "
                         "or an array task like 1234_5)")
    return job


def _parse_record(line: str) -> dict[str, str]:
    keys = list(_FIELD_RE.finditer(line))
    return {m.group(1): line[m.end(): keys[i + 1].start() if i + 1 < len(keys) else None]
            .strip() for i, m in enumerate(keys)}


def job_records(job_id: str | int) -> list[dict[str, str]]:
    """``scontrol show job``'s fields, one dict per job (per task of a job array).

    Raises:
        JobNotFoundError: Slurm does not know the job (any more).
    """
    job = _check_job_id(job_id)
    argv = ["scontrol", "-o", "show", "job", job]
    proc = _run(argv)
    if proc.returncode != 0 or not proc.stdout.strip():
        if "Invalid job id" in proc.stderr or not proc.stderr.strip():
            raise JobNotFoundError(
                f"job {job} is not known to Slurm: it never existed, or it ended more "
                "than MinJobAge (300 s by default) ago; its output is where its --output "
                f"pointed (by default slurm-{job}.out in the directory it was submitted from)")
        raise _failed(argv, proc)
    return [_parse_record(line) for line in proc.stdout.splitlines() if line.strip()]


def queue(user: str | None = None) -> list[dict[str, str]]:
    """The jobs of ``user`` (default: you) that Slurm still lists, from ``squeue``."""
    fields = ("JobId", "Name", "State", "Elapsed", "TimeLimit", "Nodes", "Where")
    argv = ["squeue", "-h", "-u", user or getpass.getuser(),
            "-o", "%i|%j|%T|%M|%l|%D|%R"]
    proc = _run(argv)
    if proc.returncode != 0:
        raise _failed(argv, proc)
    return [dict(zip(fields, line.split("|", len(fields) - 1)))
            for line in proc.stdout.splitlines() if line.strip()]


def cancel(job_id: str | int) -> str:
    """Cancel a job; return its state before (a finished job is left alone).

    Raises:
        JobNotFoundError: Slurm does not know the job.
    """
    records = job_records(job_id)
    states = {r.get("JobState", "") for r in records}
    if states <= FINISHED_STATES:
        return "/".join(sorted(states))
    argv = ["scancel", _check_job_id(job_id)]
    proc = _run(argv)
    if proc.returncode != 0:
        raise _failed(argv, proc)
    return "/".join(sorted(states))


def output_paths(record: dict[str, str]) -> list[Path]:
    """The job's stdout file, and its stderr file if that is a different one."""
    out = []
    for key in ("StdOut", "StdErr"):
        value = record.get(key, "")
        if value and value != "/dev/null":
            path = Path(record.get("WorkDir", "."), value)
            if path not in out:
                out.append(path)
    return out


@dataclasses.dataclass(frozen=True)
class JobEnd:
    job_id: str
    state: str        #: the final state; "/"-joined when an array's tasks differ
    exit_code: int    #: the process exit status a shell would show (128+signal if killed)
    detail: str       #: Slurm's ExitCode field(s), "rc:signal"


def _exit_status(record: dict[str, str]) -> int:
    rc, _, sig = record.get("ExitCode", "0:0").partition(":")
    rc_i, sig_i = int(rc or 0), int(sig or 0)
    if sig_i:
        return 128 + sig_i
    if record.get("JobState") != "COMPLETED" and rc_i == 0:
        return 1
    return rc_i


class _Tail:
    """Hands on what was appended to a file since the last read (restarts if truncated)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read(self) -> str:
        try:
            size = self.path.stat().st_size
        except OSError:
            return ""
        if size < self.offset:
            self.offset = 0
        if size == self.offset:
            return ""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(size - self.offset)
        self.offset += len(data)
        return self.decoder.decode(data)


def follow(job_id: str | int, write: Callable[[str], object] | None = None, *,
           timeout: float | None = None) -> JobEnd:
    """Wait for a job to end, passing its output to ``write`` as it appears.

    A requeued job is followed through its restarts.  Polls ``scontrol`` with
    back-off (at most every :data:`FOLLOW_MAX_POLL` s).

    Raises:
        JobNotFoundError: Slurm does not know the job.
        TimeoutError: ``timeout`` seconds passed first.
    """
    job = _check_job_id(job_id)
    deadline = None if timeout is None else time.monotonic() + timeout
    tails: dict[Path, _Tail] = {}
    delay = 0.1

    def drain(records: list[dict[str, str]]) -> None:
        for record in records:
            for path in output_paths(record) if write else ():
                tails.setdefault(path, _Tail(path))
        for tail in tails.values():
            text = tail.read()
            if text and write:
                write(text)

    while True:
        records = job_records(job)
        drain(records)
        states = [r.get("JobState", "") for r in records]
        if all(s in FINISHED_STATES for s in states):
            drain(records)
            return JobEnd(job, "/".join(sorted(set(states))),
                          max(_exit_status(r) for r in records),
                          ",".join(r.get("ExitCode", "") for r in records))
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {job} still {'/'.join(sorted(set(states)))} "
                               f"after {timeout}s")
        time.sleep(delay)
        delay = min(delay * 1.5, FOLLOW_MAX_POLL)
