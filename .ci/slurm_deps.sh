#!/usr/bin/env bash
# Install what the Slurm tests need: Debian's Slurm (slurmctld, slurmd, the client
# commands, the Lua job_submit plugin) and munge.  Non-interactive; run as root (or
# with sudo available).  The tests start and stop the daemons themselves
# (tests/slurm/cluster.py), so nothing is enabled or started here.  The two-node
# cluster runs two slurmd on this host (``slurmd -N n1``, ``-N n2``, each with its
# own Port=): Debian's slurmd is built with support for several per host.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo -E); fi

have_all() {
    command -v slurmctld >/dev/null || [ -x /usr/sbin/slurmctld ] || return 1
    command -v slurmd >/dev/null || [ -x /usr/sbin/slurmd ] || return 1
    command -v munged >/dev/null || [ -x /usr/sbin/munged ] || return 1
    command -v sbatch >/dev/null || return 1
}

if have_all; then
    echo "slurm_deps: Slurm and munge are already installed"
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "slurm_deps: no apt-get here; install Slurm (slurmctld, slurmd, client) and munge" \
         "with this system's package manager" >&2
    exit 1
fi
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends slurm-wlm munge
