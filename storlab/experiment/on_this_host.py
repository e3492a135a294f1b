"""What the experiment asks of this machine, checked by looking only before anything starts: each
placement can hold a server's files (and the engine's data files), each device can be made here, and
the devices' images fit together."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Protocol

from storlab import engines, factors
from storlab.experiment import places
from storlab.experiment.model import ExperimentModel
from storlab.lab import caps, cgroups, devices, mounts, os_users, placements
from storlab.volume import registry


class CheckedExperiment(Protocol):
    """An experiment file as these checks read it (storlab.experiment.file.Experiment is one)."""

    model: ExperimentModel
    path: Path

    @property
    def engine(self) -> str: ...

    @property
    def directories(self) -> list[str]: ...

    @property
    def capped(self) -> dict[str, places.VolumeKeys]: ...

    def placement_path(self, name: str) -> Path: ...


def data_folders_problem(experiment: CheckedExperiment) -> tuple[tuple, str] | None:
    """Each placement that holds data files (any value of data_on names it) is a folder the engine can
    keep them in (PostgreSQL: no ' in a tablespace's location), and each that temp_on names one it can
    keep its temporary files in (MariaDB: a path innodb_temp_data_file_path can name), judged by the
    path its instances will name: a directory's real path, a device's image folder."""
    engine = engines.engine(experiment.engine)
    layout = experiment.model.layout
    named = []
    for ref in factors.values(layout.data_on):
        named += [(name, engine.data_folder_problem) for name in ([ref] if isinstance(ref, str) else list(ref or {}))]
    named += [(name, engine.temp_folder_problem) for name in factors.values(layout.temp_on) if name]
    for name, judge in dict.fromkeys(named):
        raw = experiment.model.placements[name]
        if isinstance(raw, places.DevicePlacement):
            folders = [(("placements", name, "image_dir"), Path(os.path.realpath(spec.format.image_dir)))
                       for spec in raw.specs()]
        else:
            folders = [(("placements", name), experiment.placement_path(name))]
        for loc, folder in folders:
            problem = judge(folder)
            if problem:
                return loc, problem
    return None


def placements_problem(experiment: CheckedExperiment) -> tuple[tuple, str] | None:
    """Each placement can hold a server's files, and no directory has two names; a device placement
    can be made on this machine (root, tools, room for its image). Only looks."""
    user = os_users.server_user(create=False)
    by_path: dict[Path, str] = {}
    for name, raw in experiment.model.placements.items():
        loc = ("placements", name)
        if isinstance(raw, places.DevicePlacement):
            for spec in raw.specs():
                try:
                    devices.check_host(name, spec)
                except devices.DeviceRefused as refused:
                    return (*loc, refused.key), refused.reason
                blocked = os_users.unreachable_ancestor(spec.format.image_dir, user)
                if blocked is not None:
                    return (*loc, "image_dir"), (f"{spec.format.image_dir} is not reachable by the servers' OS user "
                                                 f"{user.name} ({blocked} is mode {blocked.stat().st_mode & 0o7777:04o}): "
                                                 "the device is mounted inside it")
            continue
        if isinstance(raw, places.DirectoryPlacement):
            loc = (*loc, "path")
        path = placements.resolve(places.path_text(raw), experiment.path.parent)
        problem = placements.path_problem(path, user)
        if problem:
            return loc, problem
        real = Path(os.path.realpath(path))
        if real in by_path:
            return loc, f"the same directory as placements.{by_path[real]} ({real}); one name per place"
        by_path[real] = name
    return None


def image_space_problem(experiment: CheckedExperiment) -> tuple[tuple, str] | None:
    """The device placements' images fit together in the free space of each filesystem that holds
    them: a cell makes every placement's device at once, while devices.check_host weighs each image
    alone. Each placement counts its largest image, on the filesystem of its image folder (of the
    nearest folder that exists: the rest is made on it)."""
    on: dict[int, tuple[Path, dict[str, int]]] = {}  # st_dev -> (a folder on it, placement -> bytes)
    for name, raw in experiment.model.placements.items():
        if not isinstance(raw, places.DevicePlacement):
            continue
        for spec in raw.specs():
            where = spec.format.image_dir
            while not where.exists():
                where = where.parent
            sizes = on.setdefault(where.stat().st_dev, (where, {}))[1]
            sizes[name] = max(sizes.get(name, 0), spec.format.size_bytes)
    for where, sizes in on.values():
        free = shutil.disk_usage(where).free
        if sum(sizes.values()) > free:
            names = ", ".join(f"placements.{name}" for name in sizes)
            return ("placements", next(iter(sizes)), "loop"), (
                f"the images of {names} need {sum(sizes.values()) / 2**30:.1f} GiB together (a cell makes every "
                f"placement's device) and there are {free / 2**30:.1f} GiB free on the filesystem holding {where}: "
                "make them smaller, or give some an image_dir on another filesystem")
    return None


def volume_problem(experiment: CheckedExperiment) -> tuple[tuple, str] | None:
    """What each property of a placement's volume needs of this host (storlab.volume: a control group
    that holds IO caps, the delay layer), said by the property, before anything else is looked at."""
    for name, raw in experiment.model.placements.items():
        if isinstance(raw, places.VolumeKeys):
            for prop in registry.PROPERTIES:
                found = prop.host_problem(raw.volume)
                if found is not None:
                    return ("placements", name, found[0]), found[1]
    return None


def limits_problem(experiment: CheckedExperiment) -> tuple[tuple, str] | None:
    """A server memory limit can be set here (cgroups) beside the IO caps asked."""
    memory = any(m not in (None, places.UNCAPPED) for m in factors.values(experiment.model.layout.server_memory))
    why = cgroups.limits_unavailable(bool(experiment.capped), memory) if memory else None
    if why is None:
        return _memory_on_ram(experiment) if memory else None
    return ("layout", "server_memory"), f"a server memory limit cannot be set here: {why}"


# Filesystems whose files are memory: under a server memory limit they would be charged to whichever
# process first wrote a page (storlab copying an instance's files, or a server), so the limit would hold
# back a share of them no one could say.
RAM_FILESYSTEMS = ("tmpfs", "ramfs")


def _memory_on_ram(experiment: CheckedExperiment) -> tuple[tuple, str] | None:
    """A server memory limit beside a placement on a RAM disk is refused: the limit could not say what it holds."""
    layout = experiment.model.layout
    used = {name for key in ("data_on", "log_on", "temp_on") for ref in factors.values(getattr(layout, key))
            if ref is not None for name in ([ref] if isinstance(ref, str) else ref)}
    for name in experiment.directories:
        found = mounts.mount_of(experiment.placement_path(name)) if name in used else None
        if found is not None and found["filesystem"] in RAM_FILESYSTEMS:
            return ("layout", "server_memory"), (
                f"placements.{name} is a RAM disk ({found['filesystem']}): its files are memory that a server memory "
                "limit would charge to whichever process first wrote them, so the limit would hold back an unknown "
                "share of them; put that placement on a device (a loop device of its own), or set no server_memory")
    return None


def capped_devices_problem(experiment: CheckedExperiment) -> tuple[tuple, str] | None:
    """Each capped directory sits on a device of its own among the placements: a cap holds the whole
    device, and every placement on it."""
    capped = experiment.capped
    on: dict[str, str] = {}  # "major:minor" -> the first directory placement on it
    for name in experiment.directories:
        found = caps.device_of(experiment.placement_path(name))
        if found is None:
            if name in capped:
                return ("placements", name), (f"{experiment.placement_path(name)} sits on no block device "
                                              "(tmpfs, or a filesystem without one): there is no device to cap")
            continue
        device, dev = found
        other = on.setdefault(dev, name)
        if other != name and (name in capped or other in capped):
            return ("placements", name), (f"on {device}, as placements.{other} is; a cap holds the whole device, "
                                          "so a capped placement needs a device of its own among the placements")
    return None
