"""Issue 10: an experiment killed mid-way (SIGKILL of the whole job) continues
with resume=True.  Phase "first" runs until the test kills it (or phase
"preempt" until it sends the driver Slurm's warning, SIGUSR1); phase "resume"
finishes it and checks that every trial finished exactly once, each result
iteration logged once, unfinished trials continuing from their checkpoints.

Every train() appends "<phase> <trial tag> <iteration> <restored-from> <node id>"
to a ledger in the test's directory, flushed at once, so the test sees progress
(and, on two nodes, where each trial ran: the runtime's ``node-<i>``).
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import json
import time

from _harness import check, init_kwargs, ok, report, section, tmp_path

import hpc_ray as ray
from hpc_ray import tune
from hpc_ray.runtime import context

PHASE = sys.argv[1]
LEDGER = tmp_path("ledger")
LOCAL = tmp_path("ray_results")
ITERS = 8
SLEEP = float(os.environ.get("TUNE_TEST_SLEEP", "0.1"))


class Slow(tune.Trainable):
    def _setup(self, config):
        self.i = 0
        self.restored_from = 0

    def _train(self):
        time.sleep(SLEEP)
        self.i += 1
        with open(LEDGER, "a") as f:
            f.write(f"{PHASE} {self.config['k']} {self.i} {self.restored_from} "
                    f"node-{context.current().node}\n")
        return {"value": self.config["k"] * self.i}

    def _save(self, checkpoint_dir):
        return {"i": self.i}

    def _restore(self, state):
        self.i = self.restored_from = state["i"]


ray.init(**init_kwargs())
trials = tune.run(Slow, name="resumable", local_dir=LOCAL, verbose=1, checkpoint_freq=2,
                  stop={"training_iteration": ITERS}, resume=(PHASE == "resume"),
                  config={"k": tune.grid_search([1, 2, 3, 4, 5, 6])})

if PHASE == "preempt":
    # Slurm's warning (SIGUSR1) came: tune.run returned with every trial that was
    # running checkpointed and paused; the job exits 0 and is requeued.
    from hpc_ray import preempt
    check(preempt.preempted())
    states = sorted({t.status for t in trials})
    check("PAUSED" in states and "RUNNING" not in states, states)
    report("preempted_states", [t.status for t in trials])
    ray.shutdown()
    ok("tune_resume")
    sys.exit(0)

with section("resumed"):
    check(PHASE == "resume", "the first phase should have been killed")
    check(len(trials) == 6 and all(t.status == "TERMINATED" for t in trials),
          [(str(t), t.status) for t in trials])
    for t in trials:
        with open(os.path.join(t.logdir, "result.json")) as f:
            rows = [json.loads(line) for line in f]
        check([r["training_iteration"] for r in rows] == list(range(1, ITERS + 1)),
              (str(t), [r["training_iteration"] for r in rows]))
        check(all(r["value"] == t.config["k"] * r["training_iteration"] for r in rows), rows)
    with open(LEDGER) as f:
        lines = [line.split() for line in f]
    first = [l for l in lines if l[0] in ("first", "preempt")]
    preempted = any(l[0] == "preempt" for l in lines)
    second = [l for l in lines if l[0] == "resume"]
    summary = {}
    for k in range(1, 7):
        done_first = max([int(l[2]) for l in first if int(l[1]) == k] or [0])
        resumed = [int(l[2]) for l in second if int(l[1]) == k]
        restored = sorted({int(l[3]) for l in second if int(l[1]) == k})
        summary[k] = {"first": done_first, "second": resumed, "restored_from": restored}
        if done_first == ITERS:
            check(resumed == [], (k, summary[k]))        # finished: not run again
        elif resumed:
            # continues after its last checkpoint the driver had stored: at the
            # warning signal for a preempted job; after a SIGKILL the one of the
            # last even iteration, or the one before if the kill came between
            # the actor taking it and the driver storing it; after a node was
            # lost and the job aborted, also one the runner took at the
            # launcher's SIGTERM (a preemption) where the trial stood
            start = restored[0] if len(restored) == 1 else -1
            if preempted:
                check(start == done_first, (k, summary[k]))
            else:
                last = done_first - done_first % 2
                check(start in (last, max(last - 2, 0), done_first), (k, summary[k]))
            check(resumed == list(range(start + 1, ITERS + 1)), (k, summary[k]))
    report("summary", summary)

ray.shutdown()
ok("tune_resume")
