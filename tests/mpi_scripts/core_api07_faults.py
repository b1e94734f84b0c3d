"""Issue 36, core part: actor checkpoints, reconstruction, signals and output.

- A Checkpointable actor whose constructor, save_checkpoint and load_checkpoint
  run remote tasks, checkpointed when should_checkpoint says so, is killed
  (SIGKILL) and comes back with the newest checkpoint's state.
- max_reconstructions: a call lost with the process raises RayActorError, or
  runs again on the new instance with max_task_retries; later calls succeed;
  a constructor that fails sends one ErrorSignal per failed construction.
- Several tasks reading one task's signals in turn each see them all.
- What a task printed reaches the driver, to its last line, before get returns.
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import signal as os_signal
import time

from _harness import check, expect_raises, init_kwargs, ok, report, section, tmp_path

import hpc_ray as ray
from hpc_ray import actor as ray_actor
from hpc_ray.experimental import signal

ray.init(**init_kwargs())


# --- 1. Checkpointable: remote tasks in its hooks, checkpoints by should_checkpoint ---
@ray.remote
def opening_balance(units):
    return units * 10


@ray.remote
class Vault:
    """Where the account keeps its checkpoints (a user's choice: any store will do)."""

    def __init__(self):
        self.saved = {}
        self.expired = []
        self.puts = 0

    def put(self, key, value):
        self.saved[key] = value
        self.puts += 1

    def put_count(self):
        return self.puts

    def get(self, key):
        return self.saved[key]

    def expire(self, key):
        self.expired.append(key)
        self.saved.pop(key, None)

    def keys(self):
        return sorted(self.saved)

    def expired_count(self):
        return len(self.expired)


@ray.remote(max_reconstructions=2)
class Account(ray_actor.Checkpointable):
    def __init__(self, vault, units):
        self.vault = vault
        self.balance = ray.get(opening_balance.remote(units))   # a task in __init__
        self.restored = None

    def deposit(self, amount):
        self.balance += amount
        return self.balance

    def state(self):
        return self.balance, self.restored

    def crash(self):
        os.kill(os.getpid(), os_signal.SIGKILL)

    def should_checkpoint(self, checkpoint_context):
        return checkpoint_context.num_tasks_since_last_checkpoint >= 2

    def save_checkpoint(self, actor_id, checkpoint_id):
        ray.get(self.vault.put.remote(checkpoint_id.hex(), self.balance))

    def load_checkpoint(self, actor_id, available_checkpoints):
        newest = available_checkpoints[0].checkpoint_id
        self.balance = ray.get(self.vault.get.remote(newest.hex()))
        self.restored = len(available_checkpoints)
        return newest

    def checkpoint_expired(self, actor_id, checkpoint_id):
        ray.get(self.vault.expire.remote(checkpoint_id.hex()))


with section("Checkpointable with remote tasks in its hooks"):
    vault = Vault.remote()
    account = Account.remote(vault, 1)
    check(ray.get(account.deposit.remote(1)) == 11)
    check(ray.get(account.deposit.remote(2)) == 13)   # two calls: checkpoint of 13
    check(ray.get(account.deposit.remote(4)) == 17)
    check(ray.get(account.state.remote()) == (17, None))   # two calls: checkpoint of 17
    check(len(ray.get(vault.keys.remote())) == 2)
    expect_raises(ray.exceptions.RayActorError, ray.get, account.crash.remote(), timeout=30)
    balance, restored = ray.get(account.state.remote(), timeout=30)
    report("checkpoint_balance", balance)
    check(balance == 17, balance)
    check(restored == 2, restored)
    check(ray.get(account.deposit.remote(3)) == 20)


@ray.remote(max_reconstructions=3)
class Journal(ray_actor.Checkpointable):
    """Checkpointed after every call; ``restore`` says what load_checkpoint does."""

    def __init__(self, vault, restore="newest"):
        self.vault = vault
        self.restore = restore
        self.entries = []
        self.fail_next_save = False

    def write(self, x):
        self.entries.append(x)
        return len(self.entries)

    def write_then_raise(self, x):
        self.entries.append(x)
        raise KeyError("after writing")

    def break_next_save(self):
        self.fail_next_save = True
        return "saves break"

    def read(self):
        return self.entries

    def crash(self):
        os._exit(1)

    def should_checkpoint(self, checkpoint_context):
        return True

    def save_checkpoint(self, actor_id, checkpoint_id):
        if self.fail_next_save:
            self.fail_next_save = False
            raise OSError("disk full")
        ray.get(self.vault.put.remote(checkpoint_id.hex(), list(self.entries)))

    def load_checkpoint(self, actor_id, available_checkpoints):
        if self.restore == "none":
            return None
        if self.restore == "bogus":
            return ray_actor.ActorCheckpointID.from_random()
        newest = available_checkpoints[0].checkpoint_id
        self.entries = ray.get(self.vault.get.remote(newest.hex()))
        return newest

    def checkpoint_expired(self, actor_id, checkpoint_id):
        ray.get(self.vault.expire.remote(checkpoint_id.hex()))


def checkpoint_errors():
    return [e["message"] for e in ray.errors() if e["type"] == "checkpoint"]


with section("Checkpointable: expired checkpoints, a call that raised, hooks that fail"):
    vault = Vault.remote()
    journal = Journal.remote(vault)
    check(ray.get([journal.write.remote(i) for i in range(25)]) == list(range(1, 26)))
    check(ray.get(vault.expired_count.remote()) == 25 - ray_actor.CHECKPOINTS_TO_KEEP)
    check(len(ray.get(vault.keys.remote())) == ray_actor.CHECKPOINTS_TO_KEEP)
    expect_raises(KeyError, ray.get, journal.write_then_raise.remote(25))
    check(ray.get(vault.put_count.remote()) == 26, "a call that raised is checkpointed too")
    check(ray.get(journal.break_next_save.remote()) == "saves break", "the call goes on")
    check(ray.get(journal.write.remote(26)) == 27)
    errors = checkpoint_errors()
    check(len(errors) == 1 and "disk full" in errors[0], errors)
    expect_raises(ray.exceptions.RayActorError, ray.get, journal.crash.remote(), timeout=30)
    check(ray.get(journal.read.remote(), timeout=30) == list(range(27)))

    fresh = Journal.remote(Vault.remote(), "none")
    check(ray.get(fresh.write.remote("kept until the crash")) == 1)
    expect_raises(ray.exceptions.RayActorError, ray.get, fresh.crash.remote(), timeout=30)
    check(ray.get(fresh.read.remote(), timeout=30) == [], "load_checkpoint returned None")

    bogus = Journal.remote(Vault.remote(), "bogus")
    check(ray.get(bogus.write.remote(1)) == 1)
    expect_raises(ray.exceptions.RayActorError, ray.get, bogus.crash.remote(), timeout=30)
    check(ray.get(bogus.read.remote(), timeout=30) == [], "the actor starts anyway")
    errors = checkpoint_errors()
    check(len(errors) == 2 and "must return the id of one of" in errors[1], errors)
    report("checkpoint_errors", len(errors))


# --- 2. max_reconstructions ---------------------------------------------------------
@ray.remote(max_reconstructions=3)
class Flaky:
    def __init__(self):
        self.calls = 0

    def work(self, x):
        self.calls += 1
        return x * 2

    def die(self):
        os._exit(1)

    def pid(self):
        return os.getpid()


@ray.remote(max_reconstructions=3, max_task_retries=2)
class Retried:
    def __init__(self, marker):
        self.marker = marker

    def crash_once(self, x):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return x + 100

    def ping(self):
        return "pong"


with section("max_reconstructions: a lost call raises, later calls succeed"):
    f = Flaky.remote()
    check(ray.get(f.work.remote(1)) == 2)
    expect_raises(ray.exceptions.RayActorError, ray.get, f.die.remote(), timeout=30)
    check(ray.get([f.work.remote(i) for i in range(5)], timeout=30) == [0, 2, 4, 6, 8])
    pid = ray.get(f.pid.remote())
    os.kill(pid, os_signal.SIGKILL)
    # A call sent before the head learnt of the kill is lost with the process (it
    # raises); one made once the actor restarted runs on the new instance.
    try:
        value = ray.get(f.work.remote(21), timeout=30)
    except ray.exceptions.RayActorError:
        value = ray.get(f.work.remote(21), timeout=30)
    check(value == 42, value)
    check(ray.get(f.pid.remote()) != pid)

@ray.remote
def lose_a_call(actor):
    try:
        ray.get(actor.die.remote())
        lost = "returned"
    except ray.exceptions.RayActorError:
        lost = "RayActorError"
    return lost, ray.get(actor.work.remote(5))


with section("max_reconstructions: a task's call is lost the same way"):
    check(ray.get(lose_a_call.remote(f), timeout=60) == ("RayActorError", 10))


@ray.remote
def call_crash_once(actor):
    return ray.get(actor.crash_once.remote(2))


with section("max_reconstructions with retries: the lost call runs again"):
    r = Retried.remote(tmp_path("crash_once_marker"))
    check(ray.get(r.ping.remote()) == "pong")
    check(ray.get(r.crash_once.remote(1), timeout=30) == 101)
    check(ray.get(r.ping.remote()) == "pong")
    os.remove(tmp_path("crash_once_marker"))
    check(ray.get(call_crash_once.remote(r), timeout=60) == 102, "called from a task")


@ray.remote(max_reconstructions=3)
class FailsOnRestart:
    def __init__(self, marker):
        if os.path.exists(marker):
            raise RuntimeError("the second construction fails")
        open(marker, "w").close()

    def die(self):
        os._exit(1)

    def ping(self):
        return "pong"


@ray.remote(max_reconstructions=3)
class NeverStarts:
    def __init__(self):
        raise ValueError("no start")

    def ping(self):
        return "pong"


def error_signals(source, expected, wait=20):
    """Signals from ``source`` until ``expected`` arrived, then whatever else comes soon."""
    got = []
    import time
    deadline = time.monotonic() + wait
    while len(got) < expected and time.monotonic() < deadline:
        got.extend(signal.receive([source], timeout=1))
    got.extend(signal.receive([source], timeout=1))
    return got


with section("a failed construction sends one ErrorSignal"):
    never = NeverStarts.remote()
    got = error_signals(never, 1)
    report("never_starts_signals", len(got))
    check(len(got) == 1 and isinstance(got[0][1], signal.ErrorSignal), got)
    check(got and "no start" in str(got[0][1].get_error()), got)
    expect_raises(ray.exceptions.RayActorError, ray.get, never.ping.remote(), timeout=30)

    restart_fails = FailsOnRestart.remote(tmp_path("fails_on_restart_marker"))
    check(ray.get(restart_fails.ping.remote()) == "pong")
    for _ in range(5):   # (then its calls go straight to its process: the lost one too)
        time.sleep(0.1)
        check(ray.get(restart_fails.ping.remote()) == "pong")
    expect_raises(ray.exceptions.RayActorError, ray.get, restart_fails.die.remote(),
                  timeout=30)
    # The lost call's ActorDiedSignal (0.7: a crashed actor signals when called)
    # and the failed second construction's ErrorSignal, in either order: the
    # caller notes the one, the actor's rank the other.
    got = error_signals(restart_fails, 2)
    report("fails_on_restart_signals", len(got))
    check(sorted(type(s).__name__ for _, s in got) == ["ActorDiedSignal", "ErrorSignal"], got)
    errors = [s for _, s in got if type(s) is signal.ErrorSignal]   # (not its subclass)
    check(len(got) == 2 and "second construction" in str(errors[0].get_error()), got)
    expect_raises(ray.exceptions.RayActorError, ray.get, restart_fails.ping.remote(),
                  timeout=30)


# --- 3. signals: every reader sees them ---------------------------------------------
class Note(signal.Signal):
    def __init__(self, value):
        self.value = value


@ray.remote
def announce(n):
    for i in range(n):
        signal.send(Note(i))
    return n


@ray.remote
def read_notes(sources):
    return [s.value for _, s in signal.receive(sources, timeout=10)]


@ray.remote
class NoteReader:
    def read(self, sources):
        return [s.value for _, s in signal.receive(sources, timeout=10)]


with section("several tasks read the same signals in turn"):
    src = announce.remote(3)
    ray.get(src)
    seen = [ray.get(read_notes.remote([src]), timeout=30) for _ in range(6)]
    report("task_readers", seen)
    check(seen == [[0, 1, 2]] * 6, seen)
    readers = [NoteReader.remote() for _ in range(2)]
    seen = [ray.get(r.read.remote([src]), timeout=30) for r in readers]
    check(seen == [[0, 1, 2]] * 2, seen)
    # An actor's own receive() calls continue where its last one stopped.
    check(ray.get(readers[0].read.remote([src]), timeout=30) == [])
    check([s.value for _, s in signal.receive([src], timeout=10)] == [0, 1, 2])


# --- 4. output reaches the driver before get returns --------------------------------
@ray.remote
def chatty(n, tag):
    for i in range(n):
        print(f"{tag} line {i}")
    print(f"{tag} LAST")
    return n


@ray.remote
class Talker:
    def talk(self, n, tag):
        for i in range(n):
            print(f"{tag} line {i}")
        print(f"{tag} LAST")
        return n


with section("a task's output comes before its result"):
    for n, tag in ((1, "small"), (3000, "flood")):
        check(ray.get(chatty.remote(n, tag)) == n)
        report(f"got_{tag}", True)
    talker = Talker.remote()
    for i in range(3):
        check(ray.get(talker.talk.remote(200, f"actor{i}")) == 200)
        report(f"got_actor{i}", True)

ok("core_api07_faults")
ray.shutdown()
