"""Utilities: observation filters, registrations, config dict helpers."""
from __future__ import annotations

import copy

from .annotations import DeveloperAPI, PublicAPI, override
from .filter import MeanStdFilter, NoFilter
from .filter_manager import FilterManager

__all__ = ["FilterManager", "MeanStdFilter", "NoFilter", "deep_update", "merge_dicts", "PublicAPI",
           "DeveloperAPI", "override"]


def deep_update(original: dict, new_dict: dict, new_keys_allowed: bool = False,
                whitelist: list | tuple = ()) -> dict:
    """Update ``original`` with ``new_dict``'s values, recursively, in place.

    Args:
        original: the dict with the default values (changed and returned).
        new_dict: the values to put in.
        new_keys_allowed: whether a key ``original`` lacks may be added.
        whitelist: top-level keys of ``original`` whose dict values may take
            new sub-keys.

    Returns:
        ``original``.

    Raises:
        ValueError: a new key, where new keys are not allowed.
    """
    for key, value in new_dict.items():
        if key not in original and not new_keys_allowed:
            raise ValueError(f"Unknown config parameter `{key}` (valid: {sorted(original)})")
        if isinstance(original.get(key), dict) and isinstance(value, dict):
            deep_update(original[key], value, new_keys_allowed or key in whitelist, ())
        else:
            original[key] = value
    return original


def merge_dicts(d1: dict, d2: dict) -> dict:
    """A deep copy of ``d1`` updated recursively by ``d2`` (new keys allowed)."""
    merged = copy.deepcopy(d1)
    deep_update(merged, d2, True, ())
    return merged
