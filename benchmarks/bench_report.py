"""The results table (Markdown), ratios, PASS/MISS against the targets, and --save."""
from __future__ import annotations

import copy
import datetime
import os
import platform
import subprocess

from bench_catalog import HPC_SYSTEMS, SYSTEMS, TARGETS, WORKLOAD_BY_NAME
from bench_runner import SystemRun, pick


def _fmt(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _fmt_ratio(r: float) -> str:
    return f"{r:.1f}x" if r >= 10 else f"{r:.2f}x"


def reference(runs: dict[str, SystemRun], ref: str) -> str | None:
    """The system that stands for a target's reference ("futures" may be futures_mpi)."""
    for name in (ref, ref + "_mpi") if ref == "futures" else (ref,):
        if name in runs:
            return name
    return None


def value(runs: dict[str, SystemRun], system: str | None, wl: str) -> float | None:
    run = runs.get(system) if system else None
    res = run.results.get(wl) if run else None
    return res.value if res is not None and res.status == "ok" else None


def noisy(runs: dict[str, SystemRun], *systems: str | None, wl: str) -> str:
    """"*" when a figure behind a cell was taken under load from other jobs."""
    for s in systems:
        res = runs[s].results.get(wl) if s in runs else None
        if res is not None and res.noisy:
            return "*"
    return ""


def _cell(run: SystemRun, wl: str) -> str:
    res = run.results.get(wl)
    if res is None:
        return "-"
    if res.status == "ok":
        return _fmt(res.value) + ("*" if res.noisy else "")
    return {"n/a": "n/a", "timeout": "TIMEOUT", "error": "ERR"}[res.status]


def verdicts(runs: dict[str, SystemRun], hpc: str, wl: str) -> list[str]:
    """PASS/MISS for each target of ``wl`` whose reference system was run."""
    targets = TARGETS.get(wl, [])
    out = []
    for ref_name, factor in targets:
        ref = reference(runs, ref_name)
        if ref is None:
            continue
        a, b = value(runs, hpc, wl), value(runs, ref, wl)
        label = f" ({ref_name})" if len(targets) > 1 else ""
        if a is None:
            out.append("MISS" + label + " [no hpc_ray figure]")
        elif not b:
            out.append("?" + label + f" [no {ref} figure]")
        else:
            out.append(("PASS" if a / b >= factor else "MISS") + label
                       + noisy(runs, hpc, ref, wl=wl))
    return out


def _markdown(header: list, rows: list, numeric: range) -> str:
    """A Markdown table with aligned columns, those in ``numeric`` to the right."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(cells) -> str:
        return "| " + " | ".join(
            str(c).rjust(w) if i in numeric else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths))) + " |"
    sep = "|" + "|".join("-" * (w + 1) + ":" if i in numeric else "-" * (w + 2)
                         for i, w in enumerate(widths)) + "|"
    return "\n".join([line(header), sep] + [line(r) for r in rows])


def format_table(runs: dict[str, SystemRun], names: list[str]) -> str:
    systems = [s for s in SYSTEMS if s in runs]
    hpcs = [s for s in HPC_SYSTEMS if s in runs]
    refs = [r for r in ("ray", "futures", "pipe") if reference(runs, r)]
    ratio_cols = [(h, reference(runs, r)) for h in hpcs for r in refs]
    header = (["workload", "unit"] + systems + [f"{h}/{r}" for h, r in ratio_cols]
              + ["target"] + [f"{h} vs target" for h in hpcs])
    rows = []
    if any(r.init_s is not None for r in runs.values()):
        rows.append(["(startup)", "s"] + [
            f"{runs[s].init_s:.2f}" if runs[s].init_s is not None else "-" for s in systems]
            + [""] * (len(ratio_cols) + 1 + len(hpcs)))
    for wl in names:
        row = [wl, WORKLOAD_BY_NAME[wl].unit] + [_cell(runs[s], wl) for s in systems]
        for h, r in ratio_cols:
            a, b = value(runs, h, wl), value(runs, r, wl)
            row.append(_fmt_ratio(a / b) + noisy(runs, h, r, wl=wl)
                       if a is not None and b else "")
        row.append(", ".join(f">= {k:g}x {r}" for r, k in TARGETS.get(wl, [])))
        row += [", ".join(verdicts(runs, h, wl)) for h in hpcs]
        rows.append(row)
    text = _markdown(header, rows, range(2, 2 + len(systems) + len(ratio_cols)))
    if any(res.noisy for run in runs.values() for res in run.results.values()):
        text += ("\n\n`*`: other jobs kept more than 10% of the CPUs busy during every rep "
                 "of this figure (or of one it is compared with): treat it as a lower bound.")
    return text


def format_rounds(rounds: list[dict[str, SystemRun]], names: list[str], stat: str) -> str:
    """Each round's ratios (``--rounds``): hpc_ray against its references, with
    the figures of one round taken minutes apart at most."""
    rounds = [with_stat(r, stat) for r in rounds]
    first = rounds[0]
    hpcs = [s for s in HPC_SYSTEMS if s in first]
    refs = [r for r in ("ray", "futures", "pipe") if reference(first, r)]
    header = ["workload", "ratio"] + [f"round {i + 1}" for i in range(len(rounds))]
    rows = []
    for wl in names:
        for h in hpcs:
            for ref in refs:
                cells = []
                for runs in rounds:
                    a, b = value(runs, h, wl), value(runs, reference(runs, ref), wl)
                    cells.append(_fmt_ratio(a / b) if a is not None and b else "-")
                if any(c != "-" for c in cells):
                    rows.append([wl, f"{h}/{reference(first, ref)}"] + cells)
    return _markdown(header, rows, range(2, len(header))) if rows else ""


def with_stat(runs: dict[str, SystemRun], stat: str) -> dict[str, SystemRun]:
    """A copy of ``runs`` whose figures are recomputed as ``stat`` of the reps."""
    out = copy.deepcopy(runs)
    for run in out.values():
        for res in run.results.values():
            if res.status == "ok" and res.reps:
                res.value, res.noisy = pick(res.reps, res.foreign, stat)
    return out


def format_problems(runs: dict[str, SystemRun]) -> str:
    out = []
    for run in runs.values():
        for wl, res in run.results.items():
            if res.status in ("error", "timeout"):
                out.append(f"### {run.system} / {wl}: {res.status.upper()}\n\n"
                           f"```\n{res.detail.rstrip()}\n```")
        for w in run.warnings:
            out.append(f"### {run.system}: warning\n\n```\n{w.rstrip()}\n```")
    return "\n\n".join(out)


def format_load(runs: dict[str, SystemRun]) -> str:
    parts = [f"{r.system} {r.load[0]:.2f} -> {r.load[1]:.2f}"
             for r in runs.values() if r.load]
    busy = [f"{r.system} {r.busy_before:.0%}" for r in runs.values()
            if r.busy_before is not None]
    text = "1-min load average (start -> end of each system): " + ", ".join(parts)
    if busy:
        text += "; CPUs busy in the second before each system: " + ", ".join(busy)
    return text


# --- machine description and --save ----------------------------------------------------

def machine_info(repo: str) -> dict:
    info = {"cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    info["cpu"] = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        rev = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "hpc_ray"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        info["hpc_ray commit"] = rev + (" (+ uncommitted hpc_ray/ changes)" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def save(results_dir: str, repo: str, runs: dict[str, SystemRun], names: list[str],
         header: str, table: str, argv: list[str]) -> str:
    os.makedirs(results_dir, exist_ok=True)
    now = datetime.datetime.now()
    path = os.path.join(results_dir, f"{now:%Y-%m-%d}.md")
    if os.path.exists(path):
        path = os.path.join(results_dir, f"{now:%Y-%m-%d-%H%M%S}.md")
    versions: dict = {}
    for r in runs.values():
        versions.update(r.versions)
    lines = [f"# Microbenchmark results, {now:%Y-%m-%d %H:%M}", "",
             "Command: `python benchmarks/microbenchmark.py " + " ".join(argv) + "`", ""]
    lines += [f"- {k}: {v}" for k, v in machine_info(repo).items()]
    lines += [f"- {k} {v}" for k, v in versions.items()]
    other = "median" if "best of" in header else "best"
    lines += ["", header, "", table, "", f"The same run, {other} rep of each figure:", "",
              format_table(with_stat(runs, other), names), "", "Child commands:", ""]
    lines += [f"- `{c}`" for r in runs.values() for c in r.commands]
    problems = format_problems(runs)
    if problems:
        lines += ["", "## Errors and warnings", "", problems]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path
