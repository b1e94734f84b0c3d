"""What an actor handle costs as a task's argument: pickling it, and round trips.

A Ray program passes actor handles to tasks all the time (a parameter server's
workers, callers of a shared actor). This prints, for the hpc_ray on the path:

- the microseconds to pickle ``(handle,)`` as a task's arguments are pickled
  (``serialization.serialize``) and to unpickle it, against ``(1,)``;
- median round trips (``ray.get(f.remote(x))``, embedded, 2 CPUs) of a task that
  takes an int, one that takes a handle, one that takes a handle and makes one
  call to the actor, and two such callers at once.

    python benchmarks/handle_args.py
    cd /tmp && PYTHONPATH=<checkout> python <checkout>/benchmarks/handle_args.py   # A/B

(From outside both checkouts for an A/B: executors start with ``python -m`` in
the driver's directory, and a checkout there comes first.)
"""
from __future__ import annotations

import argparse
import pickle
import statistics
import time

import hpc_ray as ray
from hpc_ray.transport.serialization import serialize


@ray.remote
class Actor:
    def small_value(self):
        return b"ok"


@ray.remote
def takes_int(x):
    return 1


@ray.remote
def takes_handle(actor):
    return 1


@ray.remote
def calls_once(actor):
    return ray.get(actor.small_value.remote())


def per_call_us(fn, n: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def median_ms(fn, n: int) -> float:
    for _ in range(n // 10):
        fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trips", type=int, default=300, help="round trips per figure")
    opts = p.parse_args()
    ray.init(num_cpus=2)
    try:
        actors = [Actor.remote() for _ in range(2)]
        ray.get([a.small_value.remote() for a in actors])
        a = actors[0]
        blob = serialize((a,)).data
        rows = [
            ("serialize((1,))", per_call_us(lambda: serialize((1,)), 20000), "us"),
            ("serialize((handle,))", per_call_us(lambda: serialize((a,)), 20000), "us"),
            ("unpickle (handle,)", per_call_us(lambda: pickle.loads(blob), 20000), "us"),
            ("task taking an int", median_ms(lambda: ray.get(takes_int.remote(1)),
                                             opts.trips), "ms"),
            ("task taking a handle", median_ms(lambda: ray.get(takes_handle.remote(a)),
                                               opts.trips), "ms"),
            ("task making one call", median_ms(lambda: ray.get(calls_once.remote(a)),
                                               opts.trips), "ms"),
            ("two tasks making one call each",
             median_ms(lambda: ray.get([calls_once.remote(b) for b in actors]),
                       opts.trips), "ms"),
        ]
    finally:
        ray.shutdown()
    print(f"hpc_ray from {ray.__file__}")
    print("| step | median | unit |\n| --- | --: | --- |")
    for name, v, unit in rows:
        print(f"| {name} | {v:.3f} | {unit} |" if unit == "ms" else f"| {name} | {v:.1f} | {unit} |")


if __name__ == "__main__":
    main()
