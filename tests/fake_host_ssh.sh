#!/bin/sh
# MPICH hydra's "ssh" for two-host tests on one machine:
#   mpiexec -hosts 127.0.0.2:2,127.0.0.3:2 -launcher ssh -launcher-exec tests/fake_host_ssh.sh
# hydra calls it as ``<this> [ssh options] HOST COMMAND...``; it runs COMMAND here,
# so each "host" is one hydra proxy on this machine with its ranks, and MPI
# (COMM_TYPE_SHARED, PMI_HOSTNAME) sees the hosts hydra was given.
while [ $# -gt 0 ]; do
    case "$1" in
        -*) shift ;;
        *) break ;;
    esac
done
shift   # the host
exec /bin/sh -c "$*"
