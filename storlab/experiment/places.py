"""`[placements]`: where the experiment's files may live, validated as every key of the file is (one
pydantic model per kind of placement, a problem naming its key): a directory, "tmpfs", or a table
for a device storlab makes, whose list values are factors of the matrix."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from storlab import factors
from storlab.factors import KeyProblem, show
from storlab.lab import devices, placements
from storlab.sizes import digits_note, parse_size

_MOUNT_OPTIONS = re.compile(r"^[A-Za-z0-9_.:=/+-]+(,[A-Za-z0-9_.:=/+-]+)*$")
# Options that are not the filesystem's tuning but mount(8)'s powers: set-user-id files, device files
# and programs on a filesystem the servers' user writes, another device or file as the source, or
# letting users mount. A device's mount always ends with devices.SAFE, which the kernel reads last.
_POWERS = re.compile(r"^(suid|dev|exec|defaults|user|users|owner|group|remount|bind|rbind|move|loop|offset|"
                     r"sizelimit|encryption|context|fscontext|defcontext|rootcontext|uhelper|helper|x-.*|"
                     r"X-.*)(=.*)?$")


def _options(v: Any, what: str) -> str:
    if not isinstance(v, str) or (v and not _MOUNT_OPTIONS.match(v)):
        raise ValueError(f'expected options like "noatime,nodiscard" or a list of them, got {show(v)}')
    power = next((o for o in v.split(",") if _POWERS.match(o)), None) if v else None
    if power is not None:
        raise ValueError(f"{show(power)} is not a filesystem's tuning; storlab mounts every device "
                         f"{devices.SAFE} from its own image (the filesystem's own options are welcome)")
    return v


class DevicePlacement(BaseModel):
    """`fast = { loop = "4GB", sector = [512, 4096], fs = "ext4", … }`: a loop device storlab makes
    and removes (storlab.lab.devices). A key left out is None here (the identity of an experiment is
    what its file says) and its default when the device is made."""

    model_config = ConfigDict(extra="forbid")

    loop: str  # the image's size, as written
    image_dir: str | None = None
    sector: int | list[int] | None = None
    fs: str | list[str] | None = None
    mount_options: str | list[str] | None = None
    read_ahead_kb: int | list[int] | None = None
    allow_tmpfs: bool | None = None

    @field_validator("loop", mode="before")
    @classmethod
    def _size(cls, v):
        try:
            parse_size(v)
        except ValueError:
            raise ValueError(f'expected a size such as "256MB" or "1GB", got {show(v)}{digits_note(v)}') from None
        return v

    @field_validator("image_dir", mode="before")
    @classmethod
    def _image_dir(cls, v):
        if v is None:
            return v
        if not isinstance(v, str) or not v.startswith("/"):
            raise ValueError(f"expected an absolute directory, got {show(v)}")
        system = placements.system_folder(Path(os.path.realpath(v)))
        if system:
            raise ValueError(system)
        return v

    @field_validator("sector", mode="before")
    @classmethod
    def _sector(cls, v):
        return None if v is None else factors.factor(v, factors.choice(devices.SECTORS),
                                                     "one of " + ", ".join(map(str, devices.SECTORS)))

    @field_validator("fs", mode="before")
    @classmethod
    def _fs(cls, v):
        return None if v is None else factors.factor(v, factors.choice(devices.FILESYSTEMS),
                                                     "one of " + ", ".join(devices.FILESYSTEMS))

    @field_validator("mount_options", mode="before")
    @classmethod
    def _mount_options(cls, v):
        return None if v is None else factors.factor(v, _options, "mount options")

    @field_validator("read_ahead_kb", mode="before")
    @classmethod
    def _read_ahead(cls, v):
        return None if v is None else factors.factor(v, factors.non_negative_int, "a whole number of KiB >= 0")

    @field_validator("allow_tmpfs", mode="before")
    @classmethod
    def _allow_tmpfs(cls, v):
        if v is not None and not isinstance(v, bool):
            raise ValueError(f"expected true or false, got {show(v)}")
        return v

    @property
    def size_bytes(self) -> int:
        return parse_size(self.loop)

    def factors(self) -> dict[str, list[Any]]:
        """The keys given a list: each a factor of the matrix."""
        return {key: getattr(self, key) for key in devices.FACTOR_KEYS if isinstance(getattr(self, key), list)}

    def spec(self, chosen: dict[str, Any] | None = None) -> devices.DeviceSpec:
        """One cell's device: `chosen` holds a value for each factor key (the matrix's choice)."""
        value = {key: factors.values(getattr(self, key))[0] for key in devices.FACTOR_KEYS} | (chosen or {})
        fs = value["fs"] or "ext4"
        return devices.DeviceSpec(
            devices.DeviceFormat(self.size_bytes, value["sector"] or 512, fs, value["mount_options"] or "",
                                 Path(self.image_dir or devices.DEFAULT_IMAGE_DIR)),
            devices.DEFAULT_READ_AHEAD_KB if value["read_ahead_kb"] is None else value["read_ahead_kb"],
            bool(self.allow_tmpfs))

    def specs(self) -> list[devices.DeviceSpec]:
        """Every device the table can ask for, one per combination of its factors' values."""
        choices = self.factors()
        found = []
        for combination in itertools.product(*choices.values()):
            spec = self.spec(dict(zip(choices, combination)))
            if spec not in found:
                found.append(spec)
        return found

    @model_validator(mode="after")
    def _each_device(self):
        """Every combination can be made: xfs's minimum size, whole sectors."""
        for spec in self.specs():
            fmt = spec.format
            if fmt.size_bytes < devices.MIN_BYTES[fmt.fs]:
                raise KeyProblem(("loop",), f"{fmt.fs} needs at least {devices.MIN_BYTES[fmt.fs] // 2**20}MB, "
                                 f"got {show(self.loop)}")
            if fmt.size_bytes % fmt.sector:
                raise KeyProblem(("loop",), f"{show(self.loop)} is not a whole number of {fmt.sector}-byte sectors")
        return self


def device(name: str, table: Any) -> DevicePlacement:
    """A device placement's table, validated; KeyProblem naming `placements.NAME.KEY` otherwise."""
    try:
        return DevicePlacement.model_validate(table)
    except ValidationError as exc:
        err = exc.errors()[0]
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, KeyProblem):
            raise KeyProblem(("placements", name, *cause.loc), str(cause)) from None
        loc = tuple(str(k) for k in err["loc"] if not isinstance(k, int))
        message = str(cause) if cause is not None else err["msg"]
        if err["type"] == "extra_forbidden":
            message = f"unknown key; a device placement takes {', '.join(DevicePlacement.model_fields)}"
        elif err["type"] == "missing":
            message = 'missing: the size of the image, like "4GB"'
        raise KeyProblem(("placements", name, *loc), message) from None


def validated(v: Any) -> dict[str, str | DevicePlacement]:
    """The placements table: each name one the engines can use, no two names alike but for their case,
    each value a directory, "tmpfs" or a device table."""
    if not isinstance(v, dict) or not v:
        raise ValueError('expected a table of named places, such as disk = "./lab/disk"')
    if len(v) > placements.MAX_PLACEMENTS:
        raise ValueError(f"{len(v)} placements; the limit is {placements.MAX_PLACEMENTS}")
    folded: dict[str, str] = {}
    found: dict[str, str | DevicePlacement] = {}
    for name, raw in v.items():
        problem = placements.name_problem(name)
        if problem:
            raise KeyProblem(("placements", name), problem)
        if name.lower() in folded:
            raise KeyProblem(("placements", name), f"the same name as placements.{folded[name.lower()]} when case is ignored")
        folded[name.lower()] = name
        if isinstance(raw, (dict, DevicePlacement)):
            found[name] = raw if isinstance(raw, DevicePlacement) else device(name, raw)
        elif isinstance(raw, str) and raw:
            found[name] = raw
        else:
            raise KeyProblem(("placements", name), f"expected a directory path, \"tmpfs\" or a device table "
                             f"such as {{ loop = \"4GB\" }}, got {show(raw)}")
    return found
