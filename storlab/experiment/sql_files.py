"""The SQL files an experiment names (a custom workload's), read only inside the experiment file's
folder: storlab may run as root, and an experiment must not make it read (or `submit` upload) a file
of someone else's."""

from __future__ import annotations

import os
from pathlib import Path

from storlab.errors import UserError
from storlab.experiment.text import MAX_FILE_BYTES, read_text


def confined(name: str) -> str:
    """A SQL file's name, if it names a file inside the experiment file's folder (ValueError if not):
    storlab may run as root, and an experiment must not make it read (or `submit` upload) a file of
    someone else's."""
    if name.startswith("/"):
        raise ValueError("an absolute path; name a file in the experiment file's folder (or below it)")
    if name.startswith("~"):
        raise ValueError("'~' is not expanded; name a file in the experiment file's folder (or below it)")
    if ".." in Path(name).parts:
        raise ValueError("'..' leaves the experiment file's folder; name a file in it (or below it)")
    return name


def read_sql(path: Path, name: str, max_bytes: int = MAX_FILE_BYTES) -> str:
    """A SQL file the workload names, inside the experiment file's folder (no link leading out of
    it either), read as an experiment file is (a regular file of at most `max_bytes`, UTF-8)."""
    folder = path.resolve().parent
    real = Path(os.path.realpath(folder / confined(name)))
    if folder not in real.parents:
        raise ValueError(f"a link to {real}, outside the experiment file's folder; storlab reads SQL files only inside it")
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))  # what was opened, even if a name changed meanwhile
        if folder not in opened.parents:
            raise ValueError("it changed while read, to a file outside the experiment file's folder")
        return read_text(Path(f"/proc/self/fd/{fd}"), max_bytes)
    except UserError as exc:
        raise OSError(str(exc).split(": ", 1)[-1]) from None
    finally:
        os.close(fd)
