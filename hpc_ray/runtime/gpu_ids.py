"""A worker rank's GPU ids: which are free, and how much of each.

Ray hands out GPUs by id. A task or actor that asks for ``n >= 1`` GPUs (a
whole number) gets ``n`` ids that nothing else holds; one that asks for a
fraction ``f < 1`` gets one id that others may share while their fractions add
up to at most 1 (two ``num_gpus=0.5`` tasks both see GPU 0). A fraction goes to
an id that is already shared when one has room, so whole ids stay free for
whole requests.

The pool is ``{gpu id: free fraction}``, in the order the ids were given.
"""
from __future__ import annotations

from typing import Iterable

_EPS = 1e-9


def new_pool(ids: Iterable[int]) -> dict[int, float]:
    return {g: 1.0 for g in ids}


def _whole(free: dict[int, float]) -> list[int]:
    return [g for g, f in free.items() if f >= 1 - _EPS]


def fits(free: dict[int, float], need: float) -> bool:
    """Whether ids for ``need`` GPUs are free now (the sum of fractions is not enough)."""
    if need < 1:
        return any(f + _EPS >= need for f in free.values())
    return len(_whole(free)) + _EPS >= need


def take(free: dict[int, float], need: float) -> list[int]:
    """Hand out ids for ``need`` GPUs (check ``fits`` first)."""
    if need < 1:
        room = [(f, g) for g, f in free.items() if f + _EPS >= need]
        shared = [(f, g) for f, g in room if f < 1 - _EPS]
        _, g = min(shared or room)
        free[g] -= need
        return [g]
    ids = _whole(free)[:int(round(need))]
    for g in ids:
        free[g] = 0.0
    return ids


def give_back(free: dict[int, float], ids: list[int], need: float) -> None:
    share = need if need < 1 else 1.0
    for g in ids:
        free[g] = min(1.0, free.get(g, 0.0) + share)
