"""`[placements]`: where the experiment's files may live, validated as every key of the file is (one
pydantic model per kind of placement, a problem naming its key): a directory, "tmpfs", a table for a
directory with IO caps on its device, or a table for a device storlab makes. The keys of a volume's
properties (its format, caps, credits, latency) are each checked by its property (storlab.volume); a
table's list values are factors of the matrix. The file's words only: whether a path can hold a
server's files on this machine is storlab.lab.placements' to say."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_serializer, model_validator

from storlab import factors
from storlab.factors import KeyProblem, show
from storlab.lab import devices, placements
from storlab.lab.caps import IoCaps
from storlab.lab.latency import DeviceLatency
from storlab.sizes import digits_note, parse_size
from storlab.volume import added_latency, credit_buckets, device_format, io_caps, registry
from storlab.volume.io_caps import UNCAPPED

# The keys whose values hold the device's IO back (caps and credits): set on the instance's group, not
# the device, so a new value needs no new device.
CAP_KEYS = tuple(k.name for k in (*io_caps.PROPERTY.keys, *credit_buckets.PROPERTY.keys))


def _key_schema(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """The schema of the volume's keys, read from the registry when asked (a property added is in it)."""
    properties = schema.setdefault("properties", {})
    properties.pop("volume", None)
    for _, key in registry.keys(directory=model is DirectoryPlacement):
        one = dict(key.schema)
        properties[key.name] = {"anyOf": [one, {"type": "array", "items": one, "minItems": 1}],
                                **({"description": key.help} if key.help else {})}


class VolumeKeys(BaseModel):
    """The keys of a placement's table that its volume's properties own (storlab.volume.registry), each
    checked by its property and the whole by each property's conflicts; `volume` holds them (a value,
    or a factor's values), every other key being the placement's own."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_key_schema)
    directory: ClassVar[bool] = False

    volume: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _volume(cls, v):
        if not isinstance(v, dict) or "volume" in v:
            return v
        own, checked = {}, {}
        for name, value in v.items():
            owned = registry.owner(name)
            if owned is None:
                own[name] = value  # the placement's own, or an unknown key pydantic refuses
                continue
            prop, key = owned
            if cls.directory and not prop.directory:
                raise KeyProblem((name,), f'{prop.device_only}: declare it on a device placement, {{ loop = "4GB", … }}')
            try:
                checked[name] = factors.factor(value, key.check, key.what)
            except KeyProblem:
                raise
            except ValueError as exc:
                raise KeyProblem((name,), str(exc)) from None
        problem = registry.conflict(checked)
        if problem is not None:
            raise problem
        return own | {"volume": {key.name: checked[key.name] for _, key in registry.keys() if key.name in checked}}

    @model_serializer(mode="wrap")
    def _as_written(self, handler):
        """The table as the file wrote it, its volume's keys beside the placement's own (an experiment's
        identity is its file's keys)."""
        table = handler(self)
        return table | table.pop("volume", {})

    def factors(self) -> dict[str, list[Any]]:
        """The keys given a list: each a factor of the matrix, in the registry's order."""
        return {key: values for key, values in self.volume.items() if isinstance(values, list)}

    def declared(self, chosen: dict[str, Any] | None = None) -> dict[str, Any]:
        """One cell's values of the volume's keys: `chosen` holds a value for each factor key (the matrix's choice)."""
        return {key: factors.values(values)[0] for key, values in self.volume.items()} | \
            {k: v for k, v in (chosen or {}).items() if k in self.volume}

    @property
    def capped(self) -> bool:
        """Some cell's device is capped (a cap or bucket key given a number, in some level of its factor)."""
        return any(v != UNCAPPED for key in CAP_KEYS for v in factors.values(self.volume.get(key)) if v is not None)

    def caps(self, chosen: dict[str, Any] | None = None) -> IoCaps:
        """One cell's caps: each direction's, a bucket's unit capped at the rate it starts a run with."""
        return io_caps.of(self.declared(chosen))


class DirectoryPlacement(VolumeKeys):
    """`disk = { path = "./lab/disk", write_iops = 3000 }`: a directory, as the plain string names one,
    with IO caps on the whole device under it."""

    directory: ClassVar[bool] = True

    path: str

    @field_validator("path", mode="before")
    @classmethod
    def _path(cls, v):
        if not isinstance(v, str) or not v:
            raise ValueError(f"expected a directory path, got {show(v)}")
        return v

    @model_validator(mode="after")
    def _a_device(self):
        if self.path == placements.TMPFS and self.capped:
            key = next(k for k in CAP_KEYS if k in self.volume)
            raise KeyProblem((key,), "tmpfs is memory: it has no device to cap")
        return self


class DevicePlacement(VolumeKeys):
    """`fast = { loop = "4GB", sector = [512, 4096], fs = "ext4", … }`: a loop device storlab makes
    and removes (storlab.lab.devices), with its volume's properties (storlab.volume) as asked. A key
    left out is absent here (the identity of an experiment is what its file says) and its default
    when the device is made."""

    loop: str  # the image's size, as written
    image_dir: str | None = None
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

    @field_validator("allow_tmpfs", mode="before")
    @classmethod
    def _allow_tmpfs(cls, v):
        if v is not None and not isinstance(v, bool):
            raise ValueError(f"expected true or false, got {show(v)}")
        return v

    @property
    def size_bytes(self) -> int:
        return parse_size(self.loop)

    def latency(self, chosen: dict[str, Any] | None = None) -> DeviceLatency | None:
        """One cell's latency; None when the table declares none."""
        return added_latency.of(self.declared(chosen))

    def spec(self, chosen: dict[str, Any] | None = None) -> devices.DeviceSpec:
        """One cell's device: `chosen` holds a value for each factor key (the matrix's choice)."""
        value = self.declared(chosen)
        fs = value.get("fs") or "ext4"
        return devices.DeviceSpec(
            devices.DeviceFormat(self.size_bytes, value.get("sector") or 512, fs, value.get("mount_options") or "",
                                 Path(self.image_dir or devices.DEFAULT_IMAGE_DIR)),
            devices.DEFAULT_READ_AHEAD_KB if value.get("read_ahead_kb") is None else value["read_ahead_kb"],
            bool(self.allow_tmpfs), value.get("max_sectors_kb"), added_latency.of(value))

    def specs(self) -> list[devices.DeviceSpec]:
        """Every device the table can ask for, one per combination of its format's factors' values."""
        choices = {key: values for key, values in self.factors().items()
                   if key in {k.name for k in device_format.PROPERTY.keys}}
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
    return _table(name, table, DevicePlacement)


def directory(name: str, table: Any) -> DirectoryPlacement:
    """A directory placement's table (`{ path = …, write_iops = … }`), validated the same way."""
    return _table(name, table, DirectoryPlacement)


def _table(name: str, table: Any, model: type[VolumeKeys]) -> Any:
    try:
        return model.model_validate(table)
    except ValidationError as exc:
        err = exc.errors()[0]
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, KeyProblem):
            raise KeyProblem(("placements", name, *cause.loc), str(cause)) from None
        loc = tuple(str(k) for k in err["loc"] if not isinstance(k, int))
        message = str(cause) if cause is not None else err["msg"]
        kind = "a device" if model is DevicePlacement else "a directory"
        if err["type"] == "extra_forbidden":
            keys = [k for k in model.model_fields if k != "volume"] + registry.key_names(model.directory)
            message = f"unknown key; {kind} placement takes {', '.join(keys)}"
        elif err["type"] == "missing":
            message = 'missing: the size of the image, like "4GB"' if model is DevicePlacement else \
                'missing: the directory, like "./lab/disk"'
        raise KeyProblem(("placements", name, *loc), message) from None


Placement = str | DirectoryPlacement | DevicePlacement


def validated(v: Any) -> dict[str, Placement]:
    """The placements table: each name one the engines can use, no two names alike but for their case,
    each value a directory, "tmpfs", a directory's table (`path`) or a device's (`loop`)."""
    if not isinstance(v, dict) or not v:
        raise ValueError('expected a table of named places, such as disk = "./lab/disk"')
    if len(v) > placements.MAX_PLACEMENTS:
        raise ValueError(f"{len(v)} placements; the limit is {placements.MAX_PLACEMENTS}")
    folded: dict[str, str] = {}
    found: dict[str, Placement] = {}
    for name, raw in v.items():
        problem = placements.name_problem(name)
        if problem:
            raise KeyProblem(("placements", name), problem)
        if name.lower() in folded:
            raise KeyProblem(("placements", name), f"the same name as placements.{folded[name.lower()]} when case is ignored")
        folded[name.lower()] = name
        if isinstance(raw, (DevicePlacement, DirectoryPlacement)) or isinstance(raw, str) and raw:
            found[name] = raw
        elif isinstance(raw, dict) and "path" in raw and "loop" not in raw:
            found[name] = directory(name, raw)
        elif isinstance(raw, dict):
            found[name] = device(name, raw)
        else:
            raise KeyProblem(("placements", name), f"expected a directory path, \"tmpfs\" or a table such as "
                             f"{{ loop = \"4GB\" }} or {{ path = \"./lab/disk\", write_iops = 3000 }}, got {show(raw)}")
    return found


def path_text(raw: Placement) -> str | None:
    """The directory a placement names as the file wrote it ("tmpfs" for the RAM disk); None for a device."""
    if isinstance(raw, DirectoryPlacement):
        return raw.path
    return raw if isinstance(raw, str) else None


def cap_table(raw: Placement) -> VolumeKeys | None:
    """The table whose caps a placement asks, None when it asks none."""
    return raw if isinstance(raw, VolumeKeys) and raw.capped else None
