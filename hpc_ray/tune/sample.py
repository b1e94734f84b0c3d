"""Search-space primitives and the variant generation of Ray 0.7's Tune.

A config is a nested dict whose leaves may be:

- ``grid_search([...])``: an axis of the grid; every combination is one variant;
- ``sample_from(fn)``: ``fn(spec)`` is called per variant, with ``spec.config``
  holding the variant's other (already resolved) values;
- ``uniform``/``loguniform``/``choice``/``randint``: the modern samplers;
- ``function(fn)``: a literal function, passed through untouched.

``generate_variants(config)`` yields ``(tag, resolved_config)`` pairs, grid
first (in key order), each combination with fresh random samples.
"""
from __future__ import annotations

import copy
import itertools
import math
import random
from typing import Any, Callable, Iterator

import numpy as np

__all__ = ["grid_search", "sample_from", "function", "uniform", "loguniform", "choice",
           "randint", "quniform", "randn", "generate_variants", "resolve_nested"]


class _Domain:
    """A value drawn once per variant."""

    def sample(self, spec: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


class sample_from(_Domain):  # noqa: N801 - Ray's name
    """Sample a config value per variant from ``func(spec)``.

    ``spec.config`` holds the variant's other values (attribute access), so a
    value may depend on another: ``sample_from(lambda spec: spec.config.alpha * 2)``.
    """

    def __init__(self, func: Callable) -> None:
        if not callable(func):
            raise TypeError(f"sample_from needs a callable, got {func!r}")
        self.func = func

    def sample(self, spec: Any) -> Any:
        try:
            return self.func(spec)
        except TypeError:
            return self.func()

    def __repr__(self) -> str:
        return f"tune.sample_from({self.func!r})"


class function:  # noqa: N801 - Ray's name
    """Wrap a function that is a config *value*, so that it is not sampled."""

    def __init__(self, func: Callable) -> None:
        self.func = func

    def __call__(self, *args, **kwargs):
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"tune.function({self.func!r})"


class _Uniform(_Domain):
    def __init__(self, low: float, high: float, log: bool = False, q: float | None = None):
        if high < low:
            raise ValueError(f"high must be >= low, got low={low!r} high={high!r}")
        if log and low <= 0:
            raise ValueError(f"loguniform needs low > 0, got {low!r}")
        self.low, self.high, self.log, self.q = low, high, log, q

    def sample(self, spec: Any) -> float:
        if self.log:
            value = math.exp(random.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = random.uniform(self.low, self.high)
        if self.q:
            value = round(value / self.q) * self.q
        return value

    def __repr__(self) -> str:
        kind = "loguniform" if self.log else "uniform"
        return f"tune.{kind}({self.low!r}, {self.high!r})"


class _Choice(_Domain):
    def __init__(self, categories):
        self.categories = list(categories)
        if not self.categories:
            raise ValueError("choice needs at least one category")

    def sample(self, spec: Any) -> Any:
        return random.choice(self.categories)

    def __repr__(self) -> str:
        return f"tune.choice({self.categories!r})"


class _Randint(_Domain):
    def __init__(self, low: int, high: int):
        if high <= low:
            raise ValueError(f"randint needs high > low, got low={low!r} high={high!r}")
        self.low, self.high = low, high

    def sample(self, spec: Any) -> int:
        return random.randrange(self.low, self.high)

    def __repr__(self) -> str:
        return f"tune.randint({self.low!r}, {self.high!r})"


class _Randn(_Domain):
    def __init__(self, mean: float, sd: float):
        self.mean, self.sd = mean, sd

    def sample(self, spec: Any) -> float:
        return random.gauss(self.mean, self.sd)


def uniform(low: float, high: float) -> _Domain:
    """A float drawn uniformly from ``[low, high]``."""
    return _Uniform(low, high)


def quniform(low: float, high: float, q: float) -> _Domain:
    """A float drawn uniformly from ``[low, high]``, rounded to a multiple of ``q``."""
    return _Uniform(low, high, q=q)


def loguniform(low: float, high: float, base: float | None = None) -> _Domain:
    """A float whose logarithm is uniform between ``log(low)`` and ``log(high)``."""
    return _Uniform(low, high, log=True)


def choice(categories) -> _Domain:
    """One of ``categories``, uniformly."""
    return _Choice(categories)


def randint(low: int, high: int) -> _Domain:
    """An int in ``[low, high)``."""
    return _Randint(low, high)


def randn(mean: float = 0.0, sd: float = 1.0) -> _Domain:
    """A float from a normal distribution."""
    return _Randn(mean, sd)


def grid_search(values) -> dict:
    """An axis of a grid search: each value gives its own variants."""
    return {"grid_search": list(values)}


# --- variant generation ----------------------------------------------------------


class _AttrDict(dict):
    """``spec.config.alpha`` as well as ``spec["config"]["alpha"]``."""

    def __getattr__(self, item):
        try:
            value = self[item]
        except KeyError:
            raise AttributeError(item) from None
        return _AttrDict(value) if isinstance(value, dict) and not isinstance(value, _AttrDict) else value


def spec_of(config: dict) -> _AttrDict:
    """What a function of a variant is given: ``spec.config`` is ``config``."""
    return _AttrDict(config=_AttrDict(config))


def _is_grid(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "grid_search" in value


def _walk(spec: Any, prefix: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Leaves of ``spec`` (dicts and lists), with their paths."""
    if _is_grid(spec) or isinstance(spec, _Domain):
        yield prefix, spec
    elif isinstance(spec, dict):
        for key, value in spec.items():
            yield from _walk(value, prefix + (key,))
    elif isinstance(spec, list):
        for i, value in enumerate(spec):
            yield from _walk(value, prefix + (i,))


def _set(spec: Any, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        spec = spec[key]
    spec[path[-1]] = value


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 20 else text[:17] + "..."


def _tag(path: tuple, value: Any) -> str:
    """Ray 0.7's ``key=value`` of a trial's tag: the innermost name of ``path``
    with the list indices after it (``nn_layers_0=64``)."""
    pieces: list[str] = []
    for key in reversed(path):
        if isinstance(key, int):
            pieces.append(str(key))
        else:
            pieces.append(str(key))
            break
    return f"{'_'.join(reversed(pieces)) or 'value'}={_format_value(value)}"


def generate_variants(config: dict) -> Iterator[tuple[str, dict]]:
    """Yield ``(tag, config)`` for every grid combination, with samples drawn.

    ``sample_from`` functions see the variant's grid values and any value
    resolved before them; those that reference still-unresolved values are
    retried after the others (up to the number of such values).
    """
    config = config or {}
    leaves = list(_walk(config))
    grid = [(path, value["grid_search"]) for path, value in leaves if _is_grid(value)]
    domains = [(path, value) for path, value in leaves if isinstance(value, _Domain)]
    for combo in itertools.product(*[values for _, values in grid]):
        resolved = copy.deepcopy(_strip(config))
        tags = []
        for (path, _), value in zip(grid, combo):
            _set(resolved, path, value)
            tags.append(_tag(path, value))
        pending = list(domains)
        for _attempt in range(len(pending) + 1):
            retry = []
            for path, domain in pending:
                spec = spec_of(resolved)
                try:
                    value = domain.sample(spec)
                except (AttributeError, KeyError, TypeError):
                    if isinstance(domain, sample_from):
                        retry.append((path, domain))
                        continue
                    raise
                _set(resolved, path, value)
                tags.append(_tag(path, value))
            if not retry:
                break
            if len(retry) == len(pending):
                path, domain = retry[0]
                domain.sample(spec_of(resolved))  # raise its error
            pending = retry
        yield ",".join(tags), resolved


def _strip(config: Any) -> Any:
    """A copy of ``config`` with samplers replaced by None (deepcopy-safe)."""
    if _is_grid(config) or isinstance(config, _Domain):
        return None
    if isinstance(config, dict):
        return {k: _strip(v) for k, v in config.items()}
    if isinstance(config, list):
        return [_strip(v) for v in config]
    return config


def resolve_nested(config: dict) -> dict:
    """One variant of ``config`` (the first grid point); for searchers' leftovers."""
    return next(generate_variants(config))[1]


def seed(value: int) -> None:
    """Seed the samplers (Python's and numpy's global generators)."""
    random.seed(value)
    np.random.seed(value)
