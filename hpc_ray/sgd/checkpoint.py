"""Checkpoints in HDF5: model weights, optimizer state and metadata in one file.

    ckpt.h5
      attrs: format = "hpc_ray.sgd/1", meta = <json>
      /model/<name>            one dataset per weight tensor (readable by any HDF5 tool)
      /optimizer/...           the optimizer's state as a tree (below)

A tree is nested dicts, lists and tuples whose leaves are numpy arrays or
scalars (bool, int, float, str, None). Dicts and sequences become groups (with
a ``kind`` attribute and, for dicts, the original key types); arrays become
datasets; scalars become 0-d datasets with a ``type`` attribute. That is
enough for PyTorch's ``optimizer.state_dict()`` (integer keys, a ``betas``
tuple, ``None`` options) once its tensors are numpy arrays, and for the numpy
models of ``DistributedSGD``. The file is written beside its final path and
renamed into place, so a job killed mid-save leaves the previous checkpoint.
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

__all__ = ["FORMAT", "load_checkpoint", "read_tree", "save_checkpoint", "write_tree"]

FORMAT = "hpc_ray.sgd/1"

_SCALARS = {bool: "bool", int: "int", float: "float", str: "str", type(None): "none"}


def _name(key: Any) -> str:
    return str(key).replace("%", "%25").replace("/", "%2F")


def _unname(name: str) -> str:
    return name.replace("%2F", "/").replace("%25", "%")


def write_tree(group, obj: Any, name: str) -> None:
    """Write ``obj`` as ``group[name]`` (see the module docstring)."""
    if isinstance(obj, dict):
        g = group.create_group(name)
        g.attrs["kind"] = "dict"
        key_types = {}
        for key, value in obj.items():
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise TypeError(f"checkpoint keys must be str or int, got {key!r}")
            key_types[_name(key)] = "int" if isinstance(key, int) else "str"
            write_tree(g, value, _name(key))
        g.attrs["keys"] = json.dumps(key_types)
    elif isinstance(obj, (list, tuple)):
        g = group.create_group(name)
        g.attrs["kind"] = "tuple" if isinstance(obj, tuple) else "list"
        g.attrs["length"] = len(obj)
        for i, value in enumerate(obj):
            write_tree(g, value, str(i))
    elif isinstance(obj, np.ndarray):
        ds = group.create_dataset(name, data=obj)
        ds.attrs["type"] = "array"
    elif isinstance(obj, np.generic):
        write_tree(group, obj.item(), name)
    elif type(obj) in _SCALARS:
        kind = _SCALARS[type(obj)]
        data = 0 if obj is None else obj
        ds = group.create_dataset(name, data=data)
        ds.attrs["type"] = kind
    else:
        raise TypeError(f"cannot store {type(obj).__name__} in a checkpoint (leaves must "
                        f"be numpy arrays, bool, int, float, str or None)")


def read_tree(node) -> Any:
    """The object ``write_tree`` stored at ``node`` (a group or a dataset)."""
    import h5py
    if isinstance(node, h5py.Group):
        kind = node.attrs.get("kind", "dict")
        if kind == "dict":
            key_types = json.loads(node.attrs.get("keys", "{}"))
            out = {}
            # HDF5 lists members by name; keep the order they were written in.
            for name in key_types or node.keys():
                key = _unname(name)
                out[int(key) if key_types.get(name) == "int" else key] = read_tree(node[name])
            return out
        items = [read_tree(node[str(i)]) for i in range(int(node.attrs["length"]))]
        return tuple(items) if kind == "tuple" else items
    kind = node.attrs.get("type", "array")
    if kind == "array":
        return np.asarray(node[()])  # a 0-d dataset reads as a numpy scalar
    if kind == "none":
        return None
    if kind == "str":
        return node.asstr()[()]
    value = node[()]
    return {"bool": bool, "int": int, "float": float}[kind](value)


def save_checkpoint(path: str | os.PathLike, model: dict[str, np.ndarray],
                    optimizer: Any = None, meta: dict | None = None) -> str:
    """Write a checkpoint; returns ``path``.

    Args:
        path: the ``.h5`` file (replaced atomically).
        model: weight name -> array (a state dict in numpy form).
        optimizer: the optimizer's state as a tree (or None).
        meta: JSON-serializable facts (epoch, config, ...).
    """
    import h5py
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["meta"] = json.dumps(meta or {})
            g = f.create_group("model")
            g.attrs["order"] = json.dumps(list(model))
            for key, arr in model.items():
                g.create_dataset(_name(key), data=np.asarray(arr))
            if optimizer is not None:
                write_tree(f, optimizer, "optimizer")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], Any, dict]:
    """Read a checkpoint: ``(model, optimizer or None, meta)``.

    Raises:
        ValueError: the file is not an hpc_ray.sgd checkpoint.
    """
    import h5py
    with h5py.File(os.fspath(path), "r") as f:
        fmt = f.attrs.get("format")
        if fmt != FORMAT:
            raise ValueError(f"{os.fspath(path)} is not an hpc_ray.sgd checkpoint "
                             f"(format {fmt!r}, expected {FORMAT!r})")
        meta = json.loads(f.attrs.get("meta", "{}"))
        g = f["model"]
        model = {key: np.asarray(g[_name(key)][()]) for key in json.loads(g.attrs["order"])}
        optimizer = read_tree(f["optimizer"]) if "optimizer" in f else None
    return model, optimizer, meta
