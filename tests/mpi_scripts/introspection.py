"""Inspecting a job: resources, nodes, timeline and profile spans, tasks(),
objects(), progress() and as_completed()."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import io
import json
import time

from _harness import (NUM_WORKERS, check, expect_raises, init_kwargs, ok, poll_for, report,
                      section, tmp_path)

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
def wait_for_file(path, value, limit=60):
    deadline = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)
    return value


@ray.remote
def traced_work(x):
    with ray.profile("inner_span", extra_data={"x": x}):
        total = sum(range(1000))
    return total + x


# --- resources and nodes --------------------------------------------------------

with section("available_resources"):
    total = ray.cluster_resources()
    report("cluster_resources", total)
    check(ray.available_resources().get("CPU") == total["CPU"], ray.available_resources())
    # Floats, as Ray 0.7's (a fraction held makes no mix of ints and floats).
    check(all(type(v) is float for v in [*total.values(), *ray.available_resources().values()]),
          (total, ray.available_resources()))
    gate = tmp_path("gate-busy")
    busy = wait_for_file.remote(gate, 1)
    # While one task runs, one CPU is taken.
    got = poll_for(lambda: ray.available_resources().get("CPU", 0) == total["CPU"] - 1, 20)
    check(got, (ray.available_resources(), total))
    open(gate, "w").close()
    ray.get(busy)
    check(poll_for(lambda: ray.available_resources().get("CPU") == total["CPU"], 20),
          ray.available_resources())

open(tmp_path("gate-busy"), "w").close()  # even if the section failed half-way

with section("nodes"):
    nodes = ray.nodes()
    report("num_nodes", len(nodes))
    check(isinstance(nodes, list) and nodes and all(isinstance(n, dict) for n in nodes), nodes)
    check(ray.get_gpu_ids() == [], ray.get_gpu_ids())  # the driver holds no GPUs


@ray.remote
def ids_in_task():
    return ray.get_gpu_ids(), ray.get_resource_ids()


with section("ids in task"):
    gpu_ids, resource_ids = ray.get(ids_in_task.remote())
    check(gpu_ids == [], gpu_ids)
    check(isinstance(resource_ids, dict) and "CPU" in resource_ids,
          f"get_resource_ids() in a task that holds 1 CPU: {resource_ids!r}")
    report("resource_ids_in_task", {k: len(v) for k, v in resource_ids.items()})

# --- timeline and profile -------------------------------------------------------

with section("timeline"):
    refs = [traced_work.remote(i) for i in range(6)]
    check(ray.get(refs) == [499500 + i for i in range(6)])
    with ray.profile("driver_span"):
        pass
    events = ray.timeline()
    check(isinstance(events, list), type(events))
    path = tmp_path("timeline.json")
    ray.timeline(filename=path)
    with open(path) as f:
        on_disk = json.load(f)
    if isinstance(on_disk, dict):
        on_disk = on_disk.get("traceEvents", on_disk)
    task_events = [e for e in on_disk if e.get("ph") == "X" and "traced_work" in e.get("name", "")
                   and "span" not in e.get("name", "")]
    report("traced_work_events", len(task_events))
    for e in task_events:
        check(isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float)), e)
        check(e["dur"] >= 0, e)
    ranks = [(e.get("args") or {}).get("rank", e.get("pid")) for e in task_events]
    report("timeline_ranks", sorted(set(ranks)))
    spans = [e for e in on_disk if e.get("name") == "inner_span"]
    report("inner_spans", len(spans))
    check(any(json.dumps(e).find('"x"') >= 0 for e in spans), spans)  # extra_data kept
    report("driver_spans", sum(e.get("name") == "driver_span" for e in on_disk))

# --- tasks() and objects() ------------------------------------------------------

with section("tasks and objects"):
    kept = ray.put("keep me")
    task_ref = traced_work.remote(100)
    ray.get(task_ref)
    tasks = ray.tasks()
    objects = ray.objects()
    check(isinstance(tasks, (dict, list)) and len(tasks) >= 6, type(tasks))
    check(isinstance(objects, (dict, list)), type(objects))
    check("traced_work" in json.dumps(tasks, default=str), "tasks() does not name the function")
    check(kept.hex() in json.dumps(objects, default=str), "objects() does not list a put object")
    check(task_ref.hex() in json.dumps(objects, default=str)
          or task_ref.hex() in json.dumps(tasks, default=str), "the task's return object is not listed")
    # An object's ref is not a task id: the error says where to look.
    err = expect_raises(KeyError, ray.tasks, kept)
    check("objects() has it" in str(err), str(err))

with section("Ray 0.6's ray.global_state and 0.7's ray.state"):
    # The names 0.6 programs call (0.7 kept them as forwards), with the answers
    # of the calls that replaced them.
    gs = ray.global_state
    check(gs is ray.state.state, (gs, getattr(ray, "state", None)))
    check(gs.cluster_resources() == ray.cluster_resources(), gs.cluster_resources())
    check([n["NodeID"] for n in gs.client_table()] == [n["NodeID"] for n in ray.nodes()])
    check(gs.object_table(kept)["ObjectID"] == kept.hex(), gs.object_table(kept))
    check(set(gs.task_table()) <= set(ray.tasks()), "task_table() lists tasks tasks() lacks")
    path = tmp_path("global_state_trace.json")
    gs.chrome_tracing_dump(filename=path)
    with open(path) as f:
        on_disk = json.load(f)
    on_disk = on_disk.get("traceEvents", on_disk) if isinstance(on_disk, dict) else on_disk
    check(any("traced_work" in e.get("name", "") for e in on_disk), "no tasks traced")
    check(gs.error_messages() == ray.errors(include_cluster_errors=False) == ray.errors())

with section("direct calls an actor made, then idle, are listed"):
    @ray.remote
    class Callee:
        def hop(self):
            return 1

    @ray.remote
    class Calling:
        def __init__(self, callee):
            self.callee = callee

        def go(self):
            return sum(ray.get([self.callee.hop.remote() for _ in range(3)]))

    callee = Callee.remote()
    ray.get(callee.hop.remote(), timeout=30)
    calling = Calling.remote(callee)
    ray.get(calling.go.remote(), timeout=30)
    time.sleep(0.3)              # its calls to callee now go direct (it connected)
    ray.get(calling.go.remote(), timeout=30)

    def hops():
        return json.dumps(ray.tasks(), default=str).count("Callee.hop")
    # (Before, the actor's calls were reported only with its next 256 or its
    # next call after a second: an idle actor's never.)
    check(poll_for(lambda: hops() == 7, 10), f"{hops()} of 7 Callee.hop calls listed")

# --- progress and as_completed --------------------------------------------------

with section("progress"):
    refs = [traced_work.remote(i) for i in range(7)]
    out = ray.progress(refs)
    values = list(out) if out is not None and not isinstance(out, (str, bytes)) else []
    report("progress_items", len(values))
    print("PROGRESS_DONE", flush=True)

with section("as_completed"):
    # Fast tasks first, so they hold the workers before the slow one is queued:
    # this checks as_completed's order, whatever the scheduler's queueing.
    fast = [traced_work.remote(i) for i in range(3)]
    ray.get(fast, timeout=30)
    gate = tmp_path("gate-order")
    slow = wait_for_file.remote(gate, "slow", 15)
    done = ray.put("already here")
    seen = []
    for ref in ray.as_completed([slow] + fast + [done]):
        check(isinstance(ref, ray.ObjectRef), ref)
        seen.append(ref)
        if len(seen) == 4:
            # Only now can the slow one finish: completion order, not input order.
            open(gate, "w").close()
    check(set(seen[:4]) == set(fast + [done]) and seen[4:] == [slow],
          f"as_completed order {seen}: the slow task {slow} should come last")
    check(ray.get(slow, timeout=30) == "slow")
open(tmp_path("gate-order"), "w").close()

with section("no task waits behind a long one while a worker is free"):
    # One worker is busy with a long task; tasks submitted now must all run on
    # the other worker(s) and finish, not wait in the busy worker's queue.
    gate = tmp_path("gate-hol")
    slow = wait_for_file.remote(gate, "slow", 15)
    poll_for(lambda: ray.available_resources().get("CPU", 0) == total["CPU"] - 1, 10)
    fast = [traced_work.remote(i) for i in range(3)]
    ready, not_ready = ray.wait(fast, num_returns=3, timeout=10)
    check(len(ready) == 3, f"{len(not_ready)} of 3 short tasks still pending after 10 s while "
          f"only one of {total['CPU']} workers was busy (queued behind the long task?)")
    open(gate, "w").close()
    check(ray.get(slow, timeout=30) == "slow")
open(tmp_path("gate-hol"), "w").close()

ray.shutdown()
ok("introspection")
