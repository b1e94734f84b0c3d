"""The ``hpc-ray`` command: run a driver under mpiexec, or submit and follow Slurm jobs.

::

    hpc-ray run -n 4 driver.py [ARGS]     mpiexec -n 4 <python> -m hpc_ray driver.py ARGS
    hpc-ray run -n 4 -m pkg.driver ...    the same with python's -m: a module on sys.path
    hpc-ray submit driver.py [ARGS] ...   write an sbatch script, submit it (--wait: follow it)
    hpc-ray status [JOBID]                your jobs, or one job's state and exit code
    hpc-ray cancel JOBID
    hpc-ray logs JOBID [--follow]

Errors from Slurm are shown as one message, without a traceback (exit status 1;
2 for a bad option, as click does).
"""
from __future__ import annotations

import functools
import os
import sys

import click

from . import mpirun
from . import slurm


def _errors(fn):
    """Show hpc_ray's Slurm and MPI errors as click errors: a message, no traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (slurm.DriverNotFoundError, slurm.TimeFormatError) as exc:
            raise click.UsageError(str(exc)) from None
        except (slurm.SlurmError, mpirun.MPIExecNotFoundError) as exc:
            raise click.ClickException(str(exc)) from None
    return wrapper


def _check_time(ctx, param, value):
    if value is not None:
        try:
            slurm.parse_time_limit(value)
        except slurm.TimeFormatError as exc:
            raise click.BadParameter(str(exc)) from None
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hpc_ray", message="hpc-ray %(version)s")
def main() -> None:
    """hpc_ray: the Ray API on MPI ranks, on a workstation or a Slurm cluster."""


# --- run --------------------------------------------------------------------------


#: ``-m pkg.module``, as with ``python -m``: rank 0 runs the module as ``__main__``,
#: found on ``sys.path`` with the working directory first.
MODULE_OPTION = click.option(
    "-m", "--module", is_flag=True,
    help="DRIVER is a module to run as `python -m DRIVER` does, not a file.")


@main.command(context_settings={"ignore_unknown_options": True,
                                "allow_interspersed_args": False})
@click.option("-n", "--np", "n", type=click.IntRange(min=1), required=True,
              help="Number of MPI ranks: rank 0 runs the driver, the others are workers.")
@click.option("--python", default=sys.executable, show_default=True,
              help="Python interpreter every rank runs.")
@click.option("--dry-run", is_flag=True,
              help="Print the mpiexec command instead of running it.")
@MODULE_OPTION
@click.argument("driver", type=click.Path(dir_okay=False))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@_errors
def run(n: int, python: str, dry_run: bool, module: bool, driver: str,
        args: tuple[str, ...]) -> None:
    """Run DRIVER on N ranks: mpiexec -n N python -m hpc_ray DRIVER ARGS.

    Adds the flags the local MPI needs (Open MPI: --oversubscribe, and
    --allow-run-as-root as root) and exits with mpiexec's exit status.
    Everything after DRIVER is passed to the driver.
    """
    if module:
        program = ["-m", driver]
    elif os.path.isfile(driver):
        program = [driver]
    else:
        raise click.UsageError(f"driver file {driver!r} does not exist")
    argv = mpirun.mpiexec_argv(n, [python, "-m", "hpc_ray", *program, *args])
    if dry_run:
        click.echo(" ".join(argv))
        return
    sys.stdout.flush()
    sys.stderr.flush()
    # Replace this process: signals (Ctrl-C, Slurm's) and the exit status are mpiexec's.
    os.execv(argv[0], argv)


# --- submit -----------------------------------------------------------------------


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("driver", type=click.Path(dir_okay=False))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-N", "--nodes", type=click.IntRange(min=1),
              help="Number of nodes (Slurm's default: 1).")
@click.option("-n", "--ntasks", type=click.IntRange(min=1),
              help="MPI ranks in all (instead of, or with, --ntasks-per-node).")
@click.option("--ntasks-per-node", type=click.IntRange(min=1),
              help="MPI ranks per node; rank 0 is the driver, the rest are workers.")
@click.option("-c", "--cpus-per-task", type=click.IntRange(min=1),
              help="CPUs per rank; hpc_ray reads it as each worker's CPU count.")
@click.option("--gpus-per-node", type=click.IntRange(min=0),
              help="GPUs per node; hpc_ray uses the GPUs Slurm binds to each rank.")
@click.option("-t", "--time", callback=_check_time,
              help="Time limit: minutes, HH:MM:SS, D-HH:MM:SS, ... (Slurm's formats).")
@click.option("-p", "--partition", help="Partition (queue) to submit to.")
@click.option("-A", "--account", help="Account to charge.")
@click.option("-J", "--job-name", help="Job name.  [default: hpc_ray-<driver name>]")
@click.option("-o", "--output",
              help="Output file; Slurm's %j (job id) and %x (name) work.  "
                   "[default: %x-%j.out in this directory]")
@click.option("--setup", multiple=True, metavar="LINE",
              help="Shell line run before the launch, e.g. \"module load openmpi\"; repeatable.")
@click.option("--requeue", is_flag=True,
              help="When Slurm warns of the time limit, let the driver's on_preempt hooks "
                   "checkpoint, then requeue the job so that it resumes.")
@click.option("--launcher", type=click.Choice(["srun", "mpiexec"]), default="srun",
              show_default=True, help="How the batch script starts the ranks.")
@click.option("--srun-mpi", metavar="TYPE",
              help="srun --mpi=TYPE (pmix for Open MPI, pmi2 for MPICH); "
                   "default: the site's MpiDefault.")
@click.option("--warning-seconds", type=click.IntRange(min=1), default=120,
              show_default=True,
              help="Send the driver USR1 (on_preempt hooks) this long before the time limit.")
@click.option("--python", default=sys.executable, show_default=True,
              help="Python interpreter on the compute nodes.")
@click.option("-S", "--sbatch-option", "sbatch_options", multiple=True, metavar="OPT",
              help="Any other sbatch option, e.g. -S --mem=8G -S --overcommit; repeatable.")
@click.option("--dry-run", is_flag=True, help="Print the sbatch script; submit nothing.")
@click.option("--wait", is_flag=True,
              help="Follow the job to its end, printing its output; exit with its exit status.")
@click.option("--parsable", is_flag=True, help="Print only the job id.")
@MODULE_OPTION
@_errors
def submit(driver, args, module, nodes, ntasks, ntasks_per_node, cpus_per_task, gpus_per_node, time,
           partition, account, job_name, output, setup, requeue, launcher, srun_mpi,
           warning_seconds, python, sbatch_options, dry_run, wait, parsable) -> None:
    """Write an sbatch script that runs DRIVER with ARGS on hpc_ray, and submit it.

    Options may come before or after DRIVER; put the driver's own options after
    `--` when their names clash with these.
    """
    spec = slurm.JobSpec(
        driver=driver, module=module, args=tuple(args), nodes=nodes, ntasks=ntasks,
        ntasks_per_node=ntasks_per_node,
        cpus_per_task=cpus_per_task, gpus_per_node=gpus_per_node, time=time,
        partition=partition, account=account, job_name=job_name, output=output,
        setup=tuple(setup), requeue=requeue, launcher=launcher, srun_mpi=srun_mpi,
        python=python, warning_seconds=warning_seconds,
        sbatch_options=tuple(sbatch_options))
    spec.check()
    if dry_run:
        click.echo(slurm.render_script(spec), nl=False)
        path, why = slurm.submission_path()
        click.echo(f"# dry run, nothing submitted; would submit with {path} ({why})",
                   err=True)
        return
    sub = slurm.submit(spec)
    if sub.notes:
        click.echo(sub.notes, err=True)
    click.echo(str(sub.job_id) if parsable else f"Submitted batch job {sub.job_id}")
    if wait:
        sys.stdout.flush()
        _follow_and_exit(str(sub.job_id))


def _follow_and_exit(job_id: str) -> None:
    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
    end = slurm.follow(job_id, write)
    if end.state != "COMPLETED" or end.exit_code:
        click.echo(f"hpc-ray: job {job_id} ended {end.state} (exit code {end.detail})",
                   err=True)
    sys.exit(end.exit_code)


# --- status, cancel, logs ----------------------------------------------------------


@main.command()
@click.argument("job_id", required=False)
@_errors
def status(job_id: str | None) -> None:
    """Show your jobs, or JOB_ID's state, exit code, nodes and output file."""
    if job_id is None:
        jobs = slurm.queue()
        if not jobs:
            click.echo("no jobs in the queue")
            return
        cols = list(jobs[0])
        widths = {c: max(len(c), *(len(j[c]) for j in jobs)) for c in cols}
        for row in [dict(zip(cols, cols)), *jobs]:
            click.echo("  ".join(row[c].ljust(widths[c]) for c in cols).rstrip())
        return
    for r in slurm.job_records(job_id):
        outputs = ", ".join(str(p) for p in slurm.output_paths(r))
        reason = r.get("Reason", "None")
        click.echo(f"job {r.get('JobId')} ({r.get('JobName')}): {r.get('JobState')}"
                   + (f" ({reason})" if reason not in ("None", "") else ""))
        click.echo(f"  exit code  {r.get('ExitCode')}")
        click.echo(f"  run time   {r.get('RunTime')} of {r.get('TimeLimit')}")
        click.echo(f"  nodes      {r.get('NodeList')} ({r.get('NumNodes')} nodes, "
                   f"{r.get('NumTasks')} tasks)")
        click.echo(f"  restarts   {r.get('Restarts', '0')}")
        click.echo(f"  output     {outputs}")


@main.command()
@click.argument("job_id")
@_errors
def cancel(job_id: str) -> None:
    """Cancel JOB_ID (a finished job is left alone)."""
    before = slurm.cancel(job_id)
    if set(before.split("/")) <= slurm.FINISHED_STATES:
        click.echo(f"job {job_id} had already ended ({before}); nothing to cancel")
    else:
        click.echo(f"cancelled job {job_id} (was {before})")


@main.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True,
              help="Keep printing new output until the job ends; exit with its exit status.")
@_errors
def logs(job_id: str, follow: bool) -> None:
    """Print JOB_ID's output file(s)."""
    if follow:
        _follow_and_exit(job_id)
    shown = False
    for record in slurm.job_records(job_id):
        for path in slurm.output_paths(record):
            if path.exists():
                click.echo(path.read_text(errors="replace"), nl=False)
                shown = True
    if not shown:
        state = "/".join(sorted({r.get("JobState", "") for r in slurm.job_records(job_id)}))
        raise click.ClickException(
            f"job {job_id} has no output yet ({state}); use --follow to wait for it")


# --- rllib ------------------------------------------------------------------------


@main.group()
def rllib() -> None:
    """RLlib: train agents from YAML experiment files, replay checkpoints."""


@rllib.command("train")
@click.option("-f", "--config-file", type=click.Path(exists=True, dir_okay=False),
              help="YAML experiment file (run:, env:, stop:, config:); overrides the flags.")
@click.option("--run", help="Algorithm: PG, A2C, A3C, PPO, APPO, DDPPO, IMPALA, ES, ARS, "
                           "DQN, APEX, DDPG, TD3, APEX_DDPG, QMIX, MARWIL, or a "
                           "registered trainable's name.")
@click.option("--env", help="Env name: registered with register_env, or a gymnasium id.")
@click.option("--config", "config_json", help="Algorithm config as JSON.")
@click.option("--stop", help="Stopping criteria as JSON, e.g. '{\"episode_reward_mean\": 150}'.")
@click.option("--checkpoint-freq", type=click.IntRange(min=0), default=0, show_default=True,
              help="Iterations between checkpoints.")
@click.option("--checkpoint-at-end", is_flag=True, help="Checkpoint when a trial ends.")
@click.option("--local-dir", type=click.Path(file_okay=False),
              help="Results directory.  [default: ~/ray_results]")
@click.option("--experiment-name", default="default", show_default=True,
              help="Name of the experiment (with --run).")
@click.option("--resume", is_flag=True, help="Continue the experiment from its saved state.")
@click.option("--num-cpus", type=click.IntRange(min=1),
              help="Embedded mode: worker processes to start (ignored under mpiexec).")
def rllib_train(config_file, run, env, config_json, stop, checkpoint_freq, checkpoint_at_end,
                local_dir, experiment_name, resume, num_cpus) -> None:
    """Train an RLlib agent (like Ray 0.7's ``rllib train``)."""
    from .rllib.train import experiments_from_args, run_train
    try:
        experiments = experiments_from_args(config_file, run, env, config_json, stop,
                                            checkpoint_freq, checkpoint_at_end, local_dir,
                                            experiment_name)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    run_train(experiments, resume=resume, num_cpus=num_cpus)


@rllib.command("rollout")
@click.argument("checkpoint", type=click.Path(exists=True))
@click.option("--run", required=True, help="The algorithm that wrote the checkpoint.")
@click.option("--env", help="Env name.  [default: the one saved with the checkpoint]")
@click.option("--steps", type=click.IntRange(min=1), default=10000, show_default=True,
              help="Env steps to run.")
@click.option("--config", "config_json", help="Config overrides as JSON.")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Pickle the episodes here (Ray 0.7's format: a list of episodes, each "
                   "a list of [obs, action, next_obs, reward, done]).")
@click.option("--no-render", is_flag=True,
              help="Do not render the env (accepted for Ray 0.7; nothing is rendered).")
def rllib_rollout(checkpoint, run, env, steps, config_json, out, no_render) -> None:
    """Replay a checkpointed policy and print each episode's reward."""
    from .rllib.rollout import rollout
    try:
        rewards = rollout(checkpoint, run, env, steps, config_json, out)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    for i, r in enumerate(rewards):
        click.echo(f"Episode {i}: reward {r:g}")
    if rewards:
        click.echo(f"Mean reward over {len(rewards)} episodes: {sum(rewards) / len(rewards):g}")


# --- tune ---------------------------------------------------------------------------


@main.group("tune")
def tune_cli() -> None:
    """Tune's tables of trials and experiments (Ray 0.7's ``tune`` CLI)."""


def _tune_table(fn, *args, **kwargs) -> None:
    from .tune.error import TuneError
    try:
        fn(*args, **kwargs)
    except TuneError as exc:
        raise click.UsageError(str(exc)) from None


def _names(text: str | None) -> list[str] | None:
    return [n.strip() for n in text.split(",") if n.strip()] if text else None


def _table_options(command):
    """The options both tables take: --sort, --output, --filter."""
    for option in reversed((
            click.option("--sort", help="Column(s) to sort on, comma-separated."),
            click.option("--output", help="Also write the table to this .csv or .pkl file."),
            click.option("--filter", "filter_op",
                         help='Keep rows matching "<column> <operator> <value>", e.g. '
                              '"trial_id == 7b99a28a" or "total_trials <= 1".'))):
        command = option(command)
    return command


@tune_cli.command("list-trials")
@click.argument("experiment_path", type=click.Path(exists=True, file_okay=False))
@_table_options
@click.option("--columns", help="Trial columns, comma-separated (default: trainable_name, "
                                "experiment_tag, trial_id, status, last_update_time).")
@click.option("--result-columns", help="Result columns, comma-separated (default: "
                                       "training_iteration, time_total_s, timesteps_total, "
                                       "mean_accuracy, mean_loss).")
def tune_list_trials(experiment_path, sort, output, filter_op, columns, result_columns) -> None:
    """A table of an experiment's trials (local_dir/name)."""
    from .tune.commands import list_trials
    _tune_table(list_trials, experiment_path, _names(sort), output, filter_op,
                _names(columns), _names(result_columns))


@tune_cli.command("list-experiments")
@click.argument("project_path", type=click.Path(exists=True, file_okay=False))
@_table_options
@click.option("--columns", help="Columns, comma-separated (default: name, total_trials, "
                                "running_trials, terminated_trials, error_trials, "
                                "last_updated).")
def tune_list_experiments(project_path, sort, output, filter_op, columns) -> None:
    """A table of the experiments under a directory (a local_dir)."""
    from .tune.commands import list_experiments
    _tune_table(list_experiments, project_path, _names(sort), output, filter_op,
                _names(columns))


if __name__ == "__main__":
    main()
