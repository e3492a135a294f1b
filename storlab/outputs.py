"""Files storlab writes beside a results store (report.html and its PNGs, runs.csv, runs.json), and
only those: each one written is listed with its checksum in the folder's .storlab-files, so a file
storlab did not write, or one changed since, is never replaced. (report.html files from before the
list carry storlab's own first line, and count as storlab's.)
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from storlab.errors import UserError

LEDGER = ".storlab-files"
REPORT_MARK = "<!doctype html><html><head><meta charset='utf-8'><title>storlab: "


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _ledger(folder: Path) -> dict[str, str]:
    try:
        held = json.loads((folder / LEDGER).read_text())
    except (OSError, ValueError):
        return {}
    return held if isinstance(held, dict) else {}


def _ours(path: Path, ledger: dict[str, str]) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    data = path.read_bytes()
    if path.name in ledger:
        return ledger[path.name] == _digest(data)
    return path.suffix == ".html" and data.startswith(REPORT_MARK.encode())  # a report from before the list


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.storlab-tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


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
