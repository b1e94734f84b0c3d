"""Settings read from ``HPC_RAY_<NAME>`` environment variables, in one place."""
from __future__ import annotations

import logging
import os
import warnings

logger = logging.getLogger(__name__)

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(text: str) -> int:
    """Parse ``"512MB"``, ``"2g"``, ``"1048576"`` into a byte count."""
    s = text.strip().lower().rstrip("b").rstrip("i")
    unit = s[-1] if s and s[-1] in _UNITS else ""
    number = s[: len(s) - len(unit)] if unit else s
    return int(float(number) * _UNITS[unit])


def positive(parse):
    """``parse``, refusing a value that is not above 0 (a setting's count or size)."""
    def parse_positive(text: str):
        value = parse(text)
        if value <= 0:
            raise ValueError(f"{text!r} is not above 0")
        return value
    return parse_positive


def os_environ_get(name: str, default, parse=str):
    """Read ``HPC_RAY_<name>``; warn and fall back to ``default`` on a bad value."""
    key = f"HPC_RAY_{name}"
    raw = os.environ.get(key)
    if raw is None or raw == "":
        return default
    try:
        return parse(raw)
    except (TypeError, ValueError):
        warnings.warn(f"ignoring {key}={raw!r}: cannot use it, using "
                      f"{'the default' if default is None else repr(default)}", stacklevel=2)
        return default
