"""The runtime imports nothing above it: ``hpc_ray/runtime`` and ``hpc_ray/transport``
use only each other, ``hpc_ray.exceptions`` and ``hpc_ray._config`` (the layers
above reach the runtime through ``runtime.hooks`` and the context protocol)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hpc_ray"
ALLOWED = {
    "runtime": ("hpc_ray.runtime", "hpc_ray.transport", "hpc_ray.exceptions", "hpc_ray._config"),
    "transport": ("hpc_ray.transport", "hpc_ray.exceptions", "hpc_ray._config"),
}


def _imports(path: Path):
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
            else:
                names = [node.module]
            for name in names:
                yield node.lineno, name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def test_runtime_and_transport_import_nothing_above_them():
    bad = []
    for layer, allowed in ALLOWED.items():
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            for line, name in _imports(path):
                if name.startswith("hpc_ray") and not name.startswith(allowed):
                    bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}")
    assert not bad, "\n".join(bad)
