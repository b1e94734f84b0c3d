"""``Trial``: one configuration's run, as the driver sees it (state only, no I/O).

States: PENDING ─start─▶ RUNNING ─▶ TERMINATED (done, stopped)
                           │  ▲ └──▶ ERROR (failed more than max_failures times)
                     pause ▼  │ unpause / restart from its checkpoint
                          PAUSED
"""
from __future__ import annotations

import base64
import uuid
from typing import Any

import cloudpickle

from . import result as R
from .resources import shape

__all__ = ["Trial", "Checkpoint", "ExportFormat"]


class ExportFormat:
    """The export formats Ray 0.7 names (``export_formats=[ExportFormat.MODEL]``).
    ``Trainable._export_model`` decides what each means; hpc_ray also passes
    on formats of the user's own."""

    CHECKPOINT = "checkpoint"
    MODEL = "model"

    @staticmethod
    def validate(export_formats: list) -> None:
        """Normalize ``export_formats`` in place (stripped, lower case).

        Raises:
            TuneError: a format other than "checkpoint" or "model".
        """
        for i, fmt in enumerate(export_formats):
            export_formats[i] = fmt.strip().lower()
            if export_formats[i] not in (ExportFormat.CHECKPOINT, ExportFormat.MODEL):
                from .error import TuneError
                raise TuneError(f"unsupported export format {fmt!r} (known: "
                                f"{[ExportFormat.CHECKPOINT, ExportFormat.MODEL]})")


class Checkpoint:
    """A trial's checkpoint on the driver's disk."""

    def __init__(self, path: str | None = None, iteration: int = 0,
                 score: float | None = None) -> None:
        #: Directory of the checkpoint (None: no checkpoint yet).
        self.path = path
        #: ``training_iteration`` the checkpoint was taken at.
        self.iteration = iteration
        #: The ``checkpoint_score_attr`` value of the result it was taken at
        #: (None: that result lacked it, or the attribute is training_iteration).
        self.score = score

    @property
    def value(self) -> str | None:
        return self.path

    def __repr__(self) -> str:
        return f"Checkpoint({self.path!r}, iteration={self.iteration})"


class Trial:
    """A trial: its config, resources, state, latest result and checkpoint."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"

    def __init__(self, trainable_name: str, config: dict | None = None,
                 trial_id: str | None = None, experiment_tag: str = "",
                 resources: dict | None = None, stopping_criterion: dict | None = None,
                 checkpoint_freq: int = 0, checkpoint_at_end: bool = False,
                 keep_checkpoints_num: int | None = None, max_failures: int = 3,
                 local_dir: str = "", trial_name_creator=None, loggers=None,
                 export_formats=None, checkpoint_score_attr: str | None = None) -> None:
        self.trainable_name = trainable_name
        self.config = dict(config or {})
        self.trial_id = trial_id or Trial.new_id()
        self.experiment_tag = experiment_tag
        self.resources = dict(resources or {"cpu": 1, "gpu": 0})
        #: ``{result field: bound}``, or a function ``f(trial_id, result) -> bool``.
        self.stopping_criterion = (stopping_criterion if callable(stopping_criterion)
                                   else dict(stopping_criterion or {}))
        self.checkpoint_freq = checkpoint_freq
        self.checkpoint_at_end = checkpoint_at_end
        self.keep_checkpoints_num = keep_checkpoints_num
        #: The result attribute ``keep_checkpoints_num`` ranks checkpoints by
        #: (``min-`` prefix: lower is better); None: training_iteration.
        self.checkpoint_score_attr = checkpoint_score_attr
        self.max_failures = max_failures
        self.local_dir = local_dir
        self.trial_name_creator = trial_name_creator
        #: The user's logger classes (``loggers=``), beside the default ones.
        self.loggers = tuple(loggers or ())
        #: ``export_formats``: exported by ``Trainable._export_model`` at the end.
        self.export_formats = list(export_formats or [])
        self.status = Trial.PENDING
        self.logdir: str | None = None
        self.last_result: dict = {}
        self.metric_history: dict[str, list] = {}
        self.checkpoint = Checkpoint()
        #: Every checkpoint still on disk, oldest first.
        self.checkpoints: list[Checkpoint] = []
        self.num_failures = 0
        self.error_file: str | None = None
        self.error_msg: str | None = None
        #: Runner-private: the actor, in-flight call, pending config change.
        self.runner = None
        self._inflight = None
        self._restore_from: str | None = None
        self._pending_setup: bool = False
        self._needs_truncate: bool = False
        #: A trial queued on this one's actor, to start when this one ends (and
        #: the one this trial is queued behind).
        self._successor: "Trial | None" = None
        self._predecessor: "Trial | None" = None
        self._outlived_call = False
        #: When it was last paused (a counter): paused trials resume oldest first.
        self._paused_seq = 0

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex[:8]

    # --- what the schedulers and the status table read --------------------------

    def __str__(self) -> str:
        if self.trial_name_creator is not None:
            return str(self.trial_name_creator(self))
        return self.identifier()

    def identifier(self) -> str:
        """Ray 0.7's trial name: the trainable, the config's env (RLlib), the tag
        (``PPO_CartPole-v0_0_lr=0.01``)."""
        name = self.trainable_name
        env = self.config.get("env") if isinstance(self.config, dict) else None
        if env is not None:
            name += f"_{getattr(env, '__name__', env)}"
        if self.experiment_tag:
            name += f"_{self.experiment_tag}"
        return name.replace("/", "_")

    __repr__ = __str__

    @property
    def trial_name(self) -> str:
        return str(self)

    def setup_args(self, checkpoint: bytes | None, reuse: bool,
                   same_trial: bool = False) -> tuple:
        """The arguments of ``TrialActor.setup`` for this trial. A stop function is
        applied on the driver: the actor needs only a dict."""
        stop = self.stopping_criterion if isinstance(self.stopping_criterion, dict) else {}
        return (self.config, self.logdir, checkpoint, reuse, self.checkpoint_freq,
                self.checkpoint_at_end, stop, same_trial)

    def resource_key(self) -> tuple:
        """Trials with equal keys can run in one another's actors (``reuse_actors``)."""
        return (self.trainable_name,) + shape(self.resources)

    def is_finished(self) -> bool:
        return self.status in (Trial.TERMINATED, Trial.ERROR)

    def has_checkpoint(self) -> bool:
        return self.checkpoint.path is not None

    def should_recover(self) -> bool:
        return self.max_failures < 0 or self.num_failures <= self.max_failures

    def should_stop(self, result: dict) -> bool:
        """True when ``result`` meets a stopping criterion (or says it is done)."""
        if result.get(R.DONE):
            return True
        if callable(self.stopping_criterion):
            return bool(self.stopping_criterion(self.trial_id, result))
        for key, bound in self.stopping_criterion.items():
            if key not in result:
                continue
            if result[key] >= bound:
                return True
        return False

    def check_stop_keys(self, result: dict) -> None:
        """A ``stop`` key that the trial's first result lacks would never stop it:
        a TuneError that names it."""
        if callable(self.stopping_criterion):
            return
        missing = [k for k in self.stopping_criterion if k not in result]
        if missing:
            from .error import TuneError
            raise TuneError(f"stop criterion {missing} of trial {self} is not in its first "
                            f"result, which has {sorted(result)}: report that key, or "
                            f"stop on one of these")

    def should_checkpoint(self, iteration: int) -> bool:
        return self.checkpoint_freq > 0 and iteration % self.checkpoint_freq == 0

    def update_last_result(self, result: dict) -> None:
        self.last_result = result
        for key, value in result.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.metric_history.setdefault(key, []).append(value)

    # --- the experiment state file ------------------------------------------------

    def to_state(self) -> dict:
        return {
            "trial_id": self.trial_id, "trainable_name": self.trainable_name,
            "experiment_tag": self.experiment_tag, "status": self.status,
            "config": _encode(self.config), "resources": self.resources,
            "stopping_criterion": _encode(self.stopping_criterion),
            "checkpoint_freq": self.checkpoint_freq,
            "checkpoint_at_end": self.checkpoint_at_end,
            "keep_checkpoints_num": self.keep_checkpoints_num,
            "max_failures": self.max_failures, "local_dir": self.local_dir,
            "logdir": self.logdir, "num_failures": self.num_failures,
            "checkpoint": [self.checkpoint.path, self.checkpoint.iteration],
            "checkpoints": [[c.path, c.iteration, _jsonable(c.score)]
                            for c in self.checkpoints],
            "checkpoint_score_attr": self.checkpoint_score_attr,
            "error_file": self.error_file, "error_msg": self.error_msg,
            "last_result": _jsonable(self.last_result),
            "loggers": _encode_or_none(self.loggers), "export_formats": self.export_formats,
            "trial_name_creator": _encode_or_none(self.trial_name_creator),
        }

    @classmethod
    def from_state(cls, state: dict) -> "Trial":
        trial = cls(state["trainable_name"], _decode(state["config"]), state["trial_id"],
                    state["experiment_tag"], state["resources"],
                    _decode(state["stopping_criterion"]), state["checkpoint_freq"],
                    state["checkpoint_at_end"], state["keep_checkpoints_num"],
                    state["max_failures"], state["local_dir"],
                    trial_name_creator=_decode(state["trial_name_creator"])
                    if state.get("trial_name_creator") else None,
                    loggers=_decode(state["loggers"]) if state.get("loggers") else None,
                    export_formats=state.get("export_formats"),
                    checkpoint_score_attr=state.get("checkpoint_score_attr"))
        trial.status = state["status"]
        trial.logdir = state["logdir"]
        trial.num_failures = state["num_failures"]
        trial.checkpoint = Checkpoint(*state["checkpoint"])
        trial.checkpoints = [Checkpoint(*c) for c in state["checkpoints"]]
        trial.error_file = state["error_file"]
        trial.error_msg = state["error_msg"]
        trial.last_result = state["last_result"] or {}
        return trial


def _encode(value: Any) -> str:
    return base64.b64encode(cloudpickle.dumps(value)).decode("ascii")


def _encode_or_none(value: Any) -> str | None:
    """Logger classes that do not pickle are left out of the state file (the
    trials of a resumed experiment then have only the default loggers)."""
    try:
        return _encode(value)
    except Exception:  # noqa: BLE001 - pickling errors come in many types
        return None


def _decode(text: str) -> Any:
    return cloudpickle.loads(base64.b64decode(text))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    try:
        return value.item()  # numpy scalars
    except Exception:  # noqa: BLE001
        return repr(value)
