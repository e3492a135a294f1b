"""A database server storlab starts: in a session of its own, in its instance's control group, as the
servers' OS user, written down in its manifest; waited for until it answers, and stopped in order."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from storlab import processes
from storlab.errors import RunFailed
from storlab.lab import cgroups, safe_files
from storlab.lab.os_users import OsUser
from storlab.lab.owned import Manifest, pid_start
from storlab.lab.user_tools import server_env

# A fresh server answers within seconds of its start, however loaded the machine; one that has not by
# then (stopped, or stuck on a hung device) never will.
START_S = 120
# A server's stop where no deadline is given (an instance's end has the run's: instances.deadlines):
# a clean shutdown writes every dirty page first.
STOP_S = 60
# Every connection to an instance: a live server accepts a session within milliseconds.
CONNECT_TIMEOUT_S = 10


class ServerProcess:
    """A database server started by storlab: its own session (so a terminal's Ctrl-C reaches storlab,
    which then stops it in order), killed by the kernel if storlab itself dies."""

    def __init__(self, argv: list[str], user: OsUser, log_path: Path, manifest: Manifest,
                 group: cgroups.ControlGroup | None = None):
        self.argv = argv
        self.log_path = log_path
        self.manifest = manifest
        self.cwd: Path | None = None  # the server's own working directory: its log's relative paths
        log = safe_files.open_log(log_path, user.uid, user.gid)
        try:
            self.proc = processes.start(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        env=server_env(user), uid=user.uid, gid=user.gid,
                                        cgroups=cgroups.joining(group))
        finally:
            os.close(log)
        manifest.server_pid = self.proc.pid
        manifest.server_start = pid_start(self.proc.pid)
        manifest.save()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_answer(self, accepts: Callable[[], bool], what: str) -> None:
        """Poll `accepts()` (a connection, given CONNECT_TIMEOUT_S) until the server accepts one, START_S
        from now at most: a server that has not answered by then is killed, so whatever waits on it
        returns, and the start fails in one line naming the server and its log. A server that exits
        meanwhile fails it at once. What storlab then asks of it (its first statements) has the
        set-up's deadline (instances.SetUp): a server that answers may be slow to do it (a declared
        device latency), and how slow is the experiment's to bound."""
        expired = threading.Event()

        def give_up() -> None:
            expired.set()
            processes.kill_tree(self.pid)

        timer = threading.Timer(START_S, give_up)
        timer.daemon = True
        timer.start()
        unanswered = (f"{what} did not answer within {START_S:g} s of its start; its instance was stopped "
                      f"(its log: {self.log_path}, kept with --keep)")
        try:
            while not accepts():
                if not self.alive():
                    raise RunFailed(f"{what} exited during start-up (exit {self.proc.returncode})")
                time.sleep(0.01)  # a refused connection costs microseconds; a server starts in a tenth of a second
        except Exception as exc:
            if expired.is_set():
                raise RunFailed(unanswered) from exc
            raise
        finally:
            timer.cancel()
            timer.join()
        if expired.is_set():  # it answered as the deadline passed: the server is gone
            raise RunFailed(unanswered)
        try:
            self.cwd = Path(os.readlink(f"/proc/{self.pid}/cwd"))
        except OSError:
            pass

    def stop(self, polite: signal.Signals, timeout: float = STOP_S) -> bool:
        """The engine's shutdown signal, then SIGKILL to the whole process group (processes.stop):
        whether it stopped within `timeout`. The manifest forgets it once it is gone; one stuck in the
        kernel, which not even SIGKILL ends, stays there for `storlab clean`."""
        stopped = processes.stop(self.proc, polite, timeout)
        if not self.alive():
            self.manifest.server_pid = None
            self.manifest.save()
        return stopped
