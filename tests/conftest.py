"""Shared fixtures: experiment files written into a temporary directory, and a private state dir so
tests never see (or clean) instances of a real storlab run on the same machine."""

from __future__ import annotations

import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest



@pytest.fixture(autouse=True)
def private_state(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("STORLAB_STATE_DIR", str(tmp_path_factory.mktemp("state")))


@pytest.fixture
def write_experiment(tmp_path):
    def write(body: str, name: str = "exp.toml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(body))
        return path

    return write


def storlab_processes() -> list[int]:
    """Server processes of any storlab instance made under this test session's state dir."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "storlab-" in cmdline and ("postgres" in cmdline or "mariadbd" in cmdline):
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def lab_root():
    """A directory the servers' OS user can reach: pytest's own tmp dirs are private to root."""
    path = Path(tempfile.mkdtemp(prefix="storlab-test-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def lab_dir(lab_root):
    path = lab_root / "disk"
    path.mkdir()
    return path

