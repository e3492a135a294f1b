"""One throwaway instance's life: its workspace (a directory of storlab's own on each placement, written
down in its manifest: storlab.lab.owned), its control group, its clients' folders and its server,
stopped and removed on every way out, at once or while the next run sets up."""

from __future__ import annotations

import functools
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

from storlab import interrupts
from storlab.lab import caps, cgroups, safe_files, server_failures
from storlab.lab.clients import Clients
from storlab.lab.os_users import OsUser, check_reachable, client_user, server_user
from storlab.lab.owned import (Manifest, make_owned_dir, new_instance_id, pid_start, remove_owned_dir)
from storlab.lab.placements import check_guarded
from storlab.lab.server_process import ServerProcess


class Server(server_failures.Diagnosed, Protocol):
    """What a workspace asks of its engine (storlab.engines.base.Engine): its name for the manifest,
    its log's grammar and its symptoms to tell a failure, and the clean-up of its shared memory."""

    name: str

    def release_shared_memory(self, dirs: list[Path], data_dirs: list[list[int]]) -> list[str]: ...


@dataclass
class Workspace:
    """The directories and bookkeeping of one instance being provisioned."""

    manifest: Manifest
    user: OsUser
    roots: dict[str, Path]  # placement name -> the instance's own directory on it
    socket_dir: Path
    clients: Clients  # its load generators: their OS user, control group and folders
    group: cgroups.ControlGroup | None = None  # every process the server starts, whatever it does
    server: ServerProcess | None = None

    def start(self, argv: list[str]) -> ServerProcess:
        # The log lives beside the socket, off the placements: a full placement cannot swallow the
        # server's last words, and the log's writes are not counted as the placement's IO.
        with interrupts.uninterrupted:  # a server started and not yet named here would outlive the instance's end
            self.server = ServerProcess(argv, self.user, self.socket_dir / "server.log", self.manifest, self.group)
        return self.server

    def restart(self, polite: signal.Signals, accepts, what: str) -> None:
        """Stop the server cleanly (its files consistent, its memory freed) and start it again."""
        argv = self.server.argv
        self.server.stop(polite)
        with self.start(argv).starting(accepts, what):
            pass  # its instance is set up already

    def log_position(self) -> int:
        """Where the server's log ends now: what it writes later is read from here (logged_since)."""
        return safe_files.size_of(self.server.log_path, self.user.uid) if self.server is not None else 0

    def logged_since(self, position: int, max_bytes: int) -> str:
        """At most `max_bytes` of what the server logged after `position`."""
        return safe_files.read_from(self.server.log_path, self.user.uid, position, max_bytes) if self.server else ""


@interrupts.owning
def workspace(engine: Server, placements: dict[str, Path], keep: bool, stop_signal: signal.Signals,
              settings: dict | None = None, io_caps: dict[str, caps.IoCaps] | None = None,
              memory_bytes: int | None = None) -> Iterator[Workspace]:
    """One owned directory on each placement plus a short socket directory (socket paths are limited
    to 107 bytes); on every way out the server is stopped and, unless `keep`, everything removed.
    A failure is told in the server's own words (`settings`: the user's, to name one it refuses).
    The instance's control group holds the IO caps asked for each placement (`io_caps`, by name, on
    the device under it) and the server's memory (`memory_bytes`), set before the server starts."""
    user = server_user()
    for name, path in placements.items():
        check_reachable(f"placement {name}", path, user)
        check_guarded(f"placement {name}", path)
    iid = new_instance_id(engine.name)
    manifest = Manifest(iid, engine.name, owner_pid=os.getpid(), owner_start=pid_start(os.getpid()))
    ws = group = None
    ended_well = False
    try:
        manifest.save()
        roots = {name: make_owned_dir(path / f"storlab-{iid}", manifest, user, server_writes=False)
                 for name, path in placements.items()}
        limits = caps.resolve(placements, io_caps or {}, memory_bytes)
        place = cgroups.place(iid, limits)
        if place is not None:
            manifest.cgroup = str(place.path)
            manifest.cgroup_more = [str(p) for p in place.more.values()]
            manifest.save()
            group = cgroups.ControlGroup.make(place, limits)
        clients = Clients(manifest, client_user())
        sockets = make_owned_dir(Path("/tmp") / f"storlab-{iid}", manifest, user, reached_by=clients.user)
        ws = Workspace(manifest, user, roots, sockets, clients, group)
        try:
            yield ws
        except Exception as exc:
            told = server_failures.told(exc, engine, settings or {}, ws.server, ws.user.uid, ws.group, ws.roots)
            if told is None:
                raise
            raise told from exc
        ended_well = True
    finally:
        with interrupts.uninterrupted:  # a second signal (or SIGHUP after Ctrl-C) must not cut the end short
            end = functools.partial(_end, manifest, engine, ws, group, stop_signal, keep)
            if _ending is not None and ended_well and not keep:
                thread = threading.Thread(target=end, name=f"storlab ending {iid}")  # not a daemon: exit waits
                thread.start()
                _ending.append(thread)
            else:
                end()


def _end(manifest: Manifest, engine: Server, ws: Workspace | None, group: cgroups.ControlGroup | None,
         stop_signal: signal.Signals, keep: bool) -> None:
    """An instance's end: its clients and server stopped, its group and shared memory gone, its
    directories removed (unless kept), and its manifest forgotten once nothing of it is left."""
    clients_left = ws is not None and not ws.clients.remove()
    if ws is not None and ws.server is not None:
        ws.server.stop(stop_signal)
    # What the server started and left (a program an experiment's SQL ran in a session of its
    # own) ends with the instance; the group goes only once it is empty.
    if group is None and manifest.cgroup:  # its making was cut short: what it made is in the manifest
        made = cgroups.recorded_with(manifest.cgroup, manifest.cgroup_more)
        group_left = made is not None and not made.remove()
    else:
        group_left = group is not None and not group.remove()
    if not group_left:
        manifest.cgroup, manifest.cgroup_more = None, []
    # A clean shutdown removes the server's shared memory itself; after SIGKILL, or a set-up
    # tool's server interrupted, it is storlab's job.
    engine.release_shared_memory([Path(d) for d in manifest.dirs], manifest.data_dirs)
    if keep:
        manifest.kept = True
        manifest.save()
    else:
        refused = [d for d in manifest.dirs if not remove_owned_dir(Path(d), manifest.instance_id)]
        if not refused and not group_left and not clients_left:
            manifest.forget()
        else:
            manifest.save()


# While ending_in_background() is open: the instances ending now, stopped and removed by threads of their own.
_ending: list[threading.Thread] | None = None


@interrupts.owning
def ending_in_background() -> Iterator[None]:
    """A run's instances, once their run is recorded, are stopped and removed while the next run sets
    up, not before it: about a tenth of a second a run, where loads take seconds. wait_ended() (called
    by quiesce before any measured run, and before a device is remade) makes sure nothing of them runs,
    writes or unlinks a file during a measured load; the block's end waits for them all, on every path."""
    global _ending
    if _ending is not None:  # inside one already: that one ends them
        yield
        return
    _ending = []
    try:
        yield
    finally:
        with interrupts.uninterrupted:
            wait_ended()
        _ending = None


def wait_ended() -> None:
    """Every instance ended in the background so far is stopped and removed. Uninterrupted: Python 3.11
    takes a thread whose join a Ctrl-C cut short for ended (Thread._wait_for_tstate_lock lets go of the
    lock the thread still holds, bpo-45274), so neither a later wait nor the interpreter's exit would wait
    for it, and storlab exited with that instance's end half done: its folders left."""
    with interrupts.uninterrupted:
        while _ending:
            _ending.pop(0).join()
