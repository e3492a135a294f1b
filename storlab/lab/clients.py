"""Where a load generator of the field runs (pgbench, sysbench, pgreplay): a C client fed what the
experiment brings (a script file, a captured log), so it runs as root nowhere.

- As the OS user `storlab-client` (os_users): not root, and not the servers' user, so neither a
  client nor a server can touch the other's files. The instance's socket directory lets that user's
  group through to the sockets, and the engines let it in as the workload's role only (storlab's own
  sessions are the superuser's, which only root and the servers' user may open).
- In a control group of the instance's own beside the server's (no limits: the client's memory is
  not the server's), so whatever a client starts, even in a session of its own, is killed when the
  client is stopped, and when the instance ends on any path; the manifest names the group, so
  `storlab clean` does the same after a crash.
- In a private folder per client: root's (mode 0711, marked, in the manifest) holding what the client
  reads, which storlab writes there, and `work`, the client's own folder (mode 0700), where it writes
  its logs. storlab reads those through descriptors only: the folder is opened without following a
  link, each file too, and only the client user's regular files are read.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import subprocess
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

from storlab import interrupts, processes
from storlab.errors import RunFailed
from storlab.lab import cgroups, owned, safe_files
from storlab.lab.os_users import OsUser

WORK = "work"


@dataclass(frozen=True)
class ClientFolder:
    """One client's folder: `path` (root's: what the client reads) and `work` (the client's own)."""

    path: Path
    work: Path
    user: OsUser

    def write(self, name: str, text: str) -> Path:
        """A file the client reads, at the relative path `name` (its folders made as root's)."""
        target = self.path / name
        if target.parent != self.path:
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        safe_files.write_new(target, text)
        return target

    @contextmanager
    def written(self, prefix: str) -> Iterator[list[IO[bytes]]]:
        """Every regular file the client wrote in its folder whose name starts with `prefix`, in name
        order, open read-only (closed at the block's end); none is reached through a link, and a file
        of anyone else there is passed over."""
        try:
            folder = os.open(self.work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise RunFailed(f"{self.work}: cannot open the client's folder: {exc.strerror}") from None
        with ExitStack() as opened:
            try:
                files = []
                for name in sorted(n for n in os.listdir(folder) if n.startswith(prefix)):
                    try:
                        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                                     dir_fd=folder)
                    except OSError as exc:
                        if exc.errno in (errno.ELOOP, errno.ENOENT):
                            continue
                        raise RunFailed(f"{self.work / name}: cannot read it: {exc.strerror}") from None
                    file = opened.enter_context(os.fdopen(fd, "rb"))
                    st = os.fstat(fd)
                    if stat.S_ISREG(st.st_mode) and st.st_uid in (self.user.uid, os.getuid()):
                        files.append(file)
            finally:
                os.close(folder)
            yield files


class Clients:
    """An instance's clients: their user, their control group (made with the first client), their folders."""

    def __init__(self, manifest: owned.Manifest, user: OsUser):
        self.manifest = manifest
        self.user = user
        self.group: cgroups.ControlGroup | None = None
        self._made = False
        self._count = itertools.count()

    def _group(self) -> cgroups.ControlGroup | None:
        if not self._made:
            self._made = True
            placed = cgroups.place(f"{self.manifest.instance_id}-clients")
            if placed is not None:
                self.manifest.client_cgroup = str(placed.path)  # written down before it is made
                self.manifest.save()
                self.group = cgroups.ControlGroup.make(placed)
                if self.group is None:
                    self.manifest.client_cgroup = None
                    self.manifest.save()
        return self.group

    @interrupts.owning
    def folder(self) -> Iterator[ClientFolder]:
        """A new private folder for one client; removed, with everything the client wrote, at the end."""
        path = Path("/tmp") / f"storlab-{self.manifest.instance_id}-client{next(self._count)}"
        owned.make_owned_dir(path, self.manifest, self.user, server_writes=False)
        try:
            work = path / WORK
            work.mkdir(mode=0o700)
            if not self.user.is_self:
                os.chown(work, self.user.uid, self.user.gid, follow_symlinks=False)
            yield ClientFolder(path, work, self.user)
        finally:
            with interrupts.uninterrupted:
                self.end()
                if owned.remove_owned_dir(path, self.manifest.instance_id):
                    self.manifest.dirs.remove(str(path))
                    self.manifest.save()

    def start(self, argv: list[str], env: dict[str, str], folder: ClientFolder, open_files: int | None = None,
              **popen: Any) -> subprocess.Popen:
        """`argv` started in the client's folder, as the client user, in the clients' group, with `env`
        beside a minimal PATH, locale and home (its own folder), and at most `open_files` descriptors."""
        full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": str(folder.work),
                "USER": self.user.name, "LOGNAME": self.user.name, **env}
        return processes.start(argv, uid=self.user.uid, gid=self.user.gid, cgroups=cgroups.joining(self._group()),
                               open_files=open_files, cwd=folder.work, env=full, **popen)

    def end(self) -> None:
        """Kill whatever the clients left running (a program a script started in a session of its own)."""
        if self.group is not None:
            self.group.kill()

    def remove(self) -> bool:
        """The clients' group killed and removed (the instance's end); whether it is gone."""
        group = self.group
        if group is None and self.manifest.client_cgroup:  # its making was cut short: named in the manifest
            group = cgroups.recorded(self.manifest.client_cgroup)
        if group is not None and not group.remove():
            return False
        self.manifest.client_cgroup = None
        return True
