"""Folders another user than root can change, as the tests of what root refuses make them: one the
servers' OS user owns (the attacker the link tests play), and one open to everyone without the sticky
bit. Run as root."""

from __future__ import annotations

import os
from pathlib import Path

from storlab.lab import os_users


def servers_user_folder(path: Path) -> Path:
    """`path` made a folder of the servers' OS user."""
    user = os_users.server_user()
    path.mkdir()
    os.chown(path, user.uid, user.gid)
    return path


def open_to_all(path: Path) -> Path:
    """`path` made a folder everyone may write in, and rename or remove what others put there."""
    path.mkdir()
    path.chmod(0o777)
    return path
