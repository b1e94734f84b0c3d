"""Actor lifecycle.

::

    (create) ─▶ PENDING ─placed─▶ STARTING ─ready─▶ ALIVE
                   ▲                 │                │
                   └── no room ─ RESTARTING ◀─ died, restarts left
    every state ─▶ DEAD (killed, out of restarts, constructor failed)

While STARTING or ALIVE an actor holds its resources (and GPU ids) on its rank;
``Head._set_actor_state`` is the only code that changes ``ActorEntry.state``,
and it gives the resources back whenever an actor leaves those two states.
Entering DEAD also releases the creation arguments and drops the entry from
the live table; what is kept of a dead actor (its name and why it died, for
the error of a later call) lives in the head's bounded history.
"""
from __future__ import annotations

import collections
import enum

from ...transport import messages as m


class ActorState(enum.Enum):
    PENDING = "PENDING"          #: waiting for arguments or for room on a rank
    STARTING = "STARTING"        #: sent to a rank; the constructor runs
    ALIVE = "ALIVE"
    RESTARTING = "RESTARTING"    #: its process died; about to be placed again
    DEAD = "DEAD"


A_PENDING, A_STARTING, A_ALIVE, A_RESTARTING, A_DEAD = (
    ActorState.PENDING, ActorState.STARTING, ActorState.ALIVE, ActorState.RESTARTING,
    ActorState.DEAD)
HOLDING = frozenset((A_STARTING, A_ALIVE))

ALLOWED: dict[ActorState, frozenset] = {
    A_PENDING: frozenset((A_STARTING, A_DEAD)),
    A_STARTING: frozenset((A_ALIVE, A_RESTARTING, A_DEAD)),
    A_ALIVE: frozenset((A_RESTARTING, A_DEAD)),
    A_RESTARTING: frozenset((A_STARTING, A_PENDING, A_DEAD)),
    A_DEAD: frozenset(),
}


class ActorEntry:
    __slots__ = ("actor_id", "class_id", "spec", "resources", "rank", "state", "queue",
                 "inflight", "max_restarts", "restarts", "name", "gpu_ids", "error",
                 "class_name", "pid", "max_task_retries", "meta")

    def __init__(self, actor_id: int, spec: list, resources: dict, max_restarts: int,
                 name: str | None, class_name: str, max_task_retries: int) -> None:
        self.actor_id = actor_id
        self.class_id = spec[m.T_FN]
        self.spec = spec                      #: the creation TaskSpec (kept for restarts)
        self.resources = resources            #: held while STARTING or ALIVE
        self.rank = -1
        self.state = A_PENDING
        self.queue: collections.deque = collections.deque()  #: calls not sent yet, in order
        self.inflight: dict = {}                              #: calls sent, by task id
        self.max_restarts = max_restarts
        self.restarts = 0
        self.name = name
        self.gpu_ids: list[int] = []
        self.error: str = ""
        self.class_name = class_name
        self.pid = 0
        self.max_task_retries = max_task_retries
        self.meta = None


def check_transition(actor: ActorEntry, new: ActorState) -> None:
    if new not in ALLOWED[actor.state]:
        from .tasks import IllegalTransition
        raise IllegalTransition(f"actor {actor.class_name} cannot go from "
                                f"{actor.state.value} to {new.value}")
