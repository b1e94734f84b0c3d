"""Losing node B of two (run on 4 ranks over two fake hosts; the test kills B).

    node_loss.py

Prints ``RESULT nodes=<json>`` (each node's name and ranks as ray.nodes() gives
them). Every task writes ``<node id> <rank> <pid> <rank's pid>`` to a marker file
in the test's directory when it starts, then sleeps; the driver waits for all of
them in ``ray.get``. The test SIGKILLs every process of node B meanwhile. Should
``ray.get`` raise, it prints ``RESULT error=<text>`` with what it raised.
"""
import faulthandler
import os

faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", 60)) - 5,
                                  exit=True)

import time

from _harness import report, tmp_path

import hpc_ray as ray
from hpc_ray.runtime import context


@ray.remote
def hold(i):
    with open(tmp_path(f"started-{i}"), "w") as f:
        ctx = context.current()
        f.write(f"node-{ctx.node} {ctx.rank} {os.getpid()} {os.getppid()}\n")
    time.sleep(600)
    return i


def main():
    ray.init()
    report("nodes", [[n["NodeManagerHostname"], n["Ranks"]] for n in ray.nodes()])
    refs = [hold.remote(i) for i in range(3)]
    try:
        ray.get(refs)
    except Exception as err:
        report("error", f"{type(err).__name__}: {err}")
        raise


if __name__ == "__main__":
    main()
