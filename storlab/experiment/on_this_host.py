"""What the experiment asks of this machine, checked by looking only before anything starts: each
placement can hold a server's files (and the engine's data files), each device can be made here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from storlab import engines, factors
from storlab.experiment import places
from storlab.lab import devices, instances, placements

if TYPE_CHECKING:
    from storlab.experiment.file import Experiment


def data_folders_problem(experiment: Experiment) -> tuple[tuple, str] | None:
    """Each placement that holds data files (any value of data_on names it) is a folder the engine can
    keep them in (PostgreSQL: no ' in a tablespace's location), judged by the path its instances will
    name: a directory's real path, a device's image folder."""
    engine = engines.engine(experiment.engine)
    named = []
    for ref in factors.values(experiment.model.layout.data_on):
        named += [ref] if isinstance(ref, str) else list(ref or {})
    for name in dict.fromkeys(named):
        raw = experiment.model.placements[name]
        if isinstance(raw, places.DevicePlacement):
            folders = [(("placements", name, "image_dir"), Path(os.path.realpath(spec.format.image_dir)))
                       for spec in raw.specs()]
        else:
            folders = [(("placements", name), experiment.placement_path(name))]
        for loc, folder in folders:
            problem = engine.data_folder_problem(folder)
            if problem:
                return loc, problem
    return None


def placements_problem(experiment: Experiment) -> tuple[tuple, str] | None:
    """Each placement can hold a server's files, and no directory has two names; a device placement
    can be made on this machine (root, tools, room for its image). Only looks."""
    user = instances.server_user(create=False)
    by_path: dict[Path, str] = {}
    for name, raw in experiment.model.placements.items():
        loc = ("placements", name)
        if isinstance(raw, places.DevicePlacement):
            for spec in raw.specs():
                try:
                    devices.check_host(name, spec)
                except devices.DeviceRefused as refused:
                    return (*loc, refused.key), refused.reason
                blocked = instances.unreachable_ancestor(spec.format.image_dir, user)
                if blocked is not None:
                    return (*loc, "image_dir"), (f"{spec.format.image_dir} is not reachable by the servers' OS user "
                                                 f"{user.name} ({blocked} is mode {blocked.stat().st_mode & 0o7777:04o}): "
                                                 "the device is mounted inside it")
            continue
        path = placements.resolve(raw, experiment.path.parent)
        problem = placements.path_problem(path, user)
        if problem:
            return loc, problem
        real = Path(os.path.realpath(path))
        if real in by_path:
            return loc, f"the same directory as placements.{by_path[real]} ({real}); one name per place"
        by_path[real] = name
    return None
