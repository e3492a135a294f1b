"""Files storlab writes beside a results store (report.html and its PNGs, the export's files), and
only those: each one written is listed with its checksum in the folder's .storlab-files, so a file
storlab did not write, or one changed since, is never replaced. (report.html files from before the
list carry storlab's own first line, and count as storlab's.)
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

from storlab.errors import UserError

LEDGER = ".storlab-files"
MAX_BYTES = 1 << 30  # a file of storlab's is never near this; a bigger one is not
REPORT_MARK = "<!doctype html><html><head><meta charset='utf-8'><title>storlab: "


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: Path) -> bytes | None:
    """A regular file's bytes; None for anything else (a link is not followed, a FIFO does not block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(MAX_BYTES + 1)
    finally:
        os.close(fd)


def _ledger(folder: Path) -> dict[str, str]:
    try:
        ledger = json.loads(_read(folder / LEDGER) or b"{}")
    except ValueError:
        return {}
    return ledger if isinstance(ledger, dict) else {}


def _ours(path: Path, ledger: dict[str, str]) -> bool:
    data = _read(path)
    if data is None:
        return False
    if path.name in ledger:
        return ledger[path.name] == _digest(data)
    return path.suffix == ".html" and data.startswith(REPORT_MARK.encode())  # a report from before the list


def _replace(path: Path, data: bytes) -> None:
    """A new file under a name no one could have planted a link at, then renamed over `path` (a
    rename replaces a link there, never follows it)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".storlab-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def claim(folder: Path, names: list[str]) -> None:
    """Before writing any of them: refuse if one of these files is there and is not storlab's."""
    ledger = _ledger(folder)
    for name in names:
        path = folder / name
        if (path.exists() or path.is_symlink()) and not _ours(path, ledger):
            raise UserError(f"{path}: already there and not written by storlab (or changed since); "
                            "move it away, storlab will not replace it")


def write(folder: Path, name: str, data: bytes | str) -> Path:
    """Write folder/name, refusing to replace a file storlab did not write there."""
    claim(folder, [name])
    path = folder / name
    ledger = _ledger(folder)
    body = data.encode() if isinstance(data, str) else data
    try:
        _replace(path, body)
        ledger[name] = _digest(body)
        _replace(folder / LEDGER, json.dumps(ledger, indent=1, sort_keys=True).encode())
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror}") from None
    return path
