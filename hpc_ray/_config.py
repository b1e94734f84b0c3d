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


def os_environ_get(name: str, default, parse=str):
    """Read ``HPC_RAY_<name>``; warn and fall back to ``default`` on a bad value."""
    key = f"HPC_RAY_{name}"
    raw = os.environ.get(key)
    if raw is None or raw == "":
        return default
    try:
        return parse(raw)
    except (TypeError, ValueError):
        warnings.warn(f"ignoring {key}={raw!r}: cannot parse it, using {default!r}",
                      stacklevel=2)
        return default
