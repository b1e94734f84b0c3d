"""Every ``HPC_RAY_*`` setting is read through ``_config.os_environ_get`` (which
warns on a bad value and keeps the default) and documented in the README."""
from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO_ROOT

#: Variables the library sets for its own processes, not settings for users.
INTERNAL = {"HPC_RAY_EXECUTOR_CONFIG"}


def _library_sources():
    return sorted((REPO_ROOT / "hpc_ray").rglob("*.py"))


def test_settings_are_read_through_the_getter_only():
    direct = []
    for path in _library_sources():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"environ(\.get\(|\[)\s*[\"']HPC_RAY_", line) and \
                    not any(name in line for name in INTERNAL):
                direct.append(f"{path.relative_to(REPO_ROOT)}:{n}: {line.strip()}")
    assert direct == []


def test_every_setting_is_in_the_readme():
    readme = (REPO_ROOT / "README.md").read_text()
    names = set()
    for path in _library_sources():
        text = path.read_text()
        names.update(f"HPC_RAY_{n}" for n in
                     re.findall(r"os_environ_get\(\s*[\"']([A-Z_0-9]+)[\"']", text))
    assert len(names) >= 15, names
    missing = sorted(n for n in names if f"`{n}`" not in readme)
    assert missing == []


def test_a_bad_value_warns_and_keeps_the_default():
    code = ("import warnings, hpc_ray.runtime.peer_calls as p, hpc_ray.transport.wait as w;"
            "print(w.SPIN_BUDGET, p.ENABLED, w.SLEEP_CAP)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**__import__("os").environ,
                                          "HPC_RAY_SPIN_US": "fast", "HPC_RAY_DIRECT_CALLS": "no",
                                          "HPC_RAY_SLEEP_CAP_US": "soon"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0.0003", "True", "0.001"]
    assert "ignoring HPC_RAY_SPIN_US='fast'" in out.stderr
    assert "ignoring HPC_RAY_SLEEP_CAP_US='soon'" in out.stderr
    assert "ignoring HPC_RAY_DIRECT_CALLS='no'" in out.stderr
