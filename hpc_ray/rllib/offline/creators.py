"""The trainer's ``input``/``output`` config turned into reader/writer creators."""
from __future__ import annotations

from typing import Callable

from .io_context import IOContext
from .json_reader import JsonReader
from .json_writer import JsonWriter
from .mixed_input import MixedInput, ShuffledInput
from .off_policy_estimator import ESTIMATORS

__all__ = ["make_input_creator", "make_output_creator", "validate_offline_config"]


def validate_offline_config(config: dict) -> None:
    """Check ``input``, ``output`` and ``input_evaluation``, naming the valid forms."""
    inp, out = config["input"], config["output"]
    if not (inp == "sampler" or isinstance(inp, (str, list, dict)) or callable(inp)):
        raise ValueError(f"config['input'] must be 'sampler', a path or glob, a list of "
                         f"files, a dict of source -> probability, or a function of an "
                         f"IOContext, got {inp!r}")
    if isinstance(inp, dict):
        total = sum(float(p) for p in inp.values())
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"config['input'] probabilities must sum to 1, got {inp!r}")
    if not (out is None or isinstance(out, str) or callable(out)):
        raise ValueError(f"config['output'] must be None, 'logdir', a directory or a "
                         f"function of an IOContext, got {out!r}")
    for name in config["input_evaluation"] or []:
        if name not in ESTIMATORS and name != "simulation":
            raise ValueError(f"unknown input_evaluation {name!r} (known: "
                             f"{sorted(ESTIMATORS) + ['simulation']})")


def make_input_creator(config: dict) -> Callable[[IOContext], object] | None:
    """None for simulation ("sampler"), else ``ioctx -> InputReader``."""
    inp = config["input"]
    shuffle = config.get("shuffle_buffer_size", 0)
    if inp == "sampler":
        return None
    if callable(inp):
        base = inp
    elif isinstance(inp, dict):
        base = lambda ioctx: MixedInput(inp, ioctx)  # noqa: E731
    else:
        base = lambda ioctx: JsonReader(inp, ioctx)  # noqa: E731
    if not shuffle:
        return base
    return lambda ioctx: ShuffledInput(base(ioctx), shuffle, config.get("seed"))


def make_output_creator(config: dict) -> Callable[[IOContext], object] | None:
    """None for no output, else ``ioctx -> OutputWriter``."""
    out = config["output"]
    if out is None:
        return None
    if callable(out):
        return out
    kwargs = dict(max_file_size=config["output_max_file_size"],
                  compress_columns=config["output_compress_columns"])
    if out == "logdir":
        return lambda ioctx: JsonWriter(ioctx.log_dir, ioctx, **kwargs)
    return lambda ioctx: JsonWriter(out, ioctx, **kwargs)
