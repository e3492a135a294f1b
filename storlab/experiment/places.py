"""`[placements]`: where the experiment's files may live, validated as every key of the file is (one
pydantic model per kind of placement, a problem naming its key): a directory, "tmpfs", a table for a
directory with IO caps on its device, or a table for a device storlab makes; a table's list values
are factors of the matrix."""

from __future__ import annotations

import itertools
import math
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from storlab import factors
from storlab.factors import KeyProblem, show
from storlab.lab import caps, credits, devices, latency, placements
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


# The caps a placement's table may set: IOs a second and MiB (2^20 bytes) a second, each direction or
# both (storlab.lab.caps), or a credit bucket on either (BUCKET_KEYS); generous bounds that no device
# reaches, so a typo is caught.
CAP_KEYS = ("read_iops", "write_iops", "iops", "read_mb_s", "write_mb_s", "mb_s", "iops_bucket", "mb_s_bucket")
MAX_IOPS = 10_000_000
MAX_MB_S = 1_000_000
MIN_MB_S = 4096 / 2**20  # a page a second: a page-sized IO waits a second for its share


UNCAPPED = "max"  # as the kernel's io.max writes it: a level of a cap's factor that holds nothing back


def _number(v: Any) -> bool:
    """A number that is one: not a boolean (TOML's true is no rate), nor inf or nan (TOML and a flag's
    float() read both)."""
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _least_problem(rate: float, unit: str) -> str | None:
    """Why a cap's rate (IOs, or MiB, a second) holds nothing: under a whole IO, or a 4 KiB page, a
    second it reaches the kernel as 0, which cgroup v1 reads as no cap at all."""
    least, said, counted = (1, "1 IO a second", "IOs") if unit == "iops" else \
        (MIN_MB_S, f"a 4 KiB page a second ({MIN_MB_S:g})", "bytes")
    if rate < least:
        return (f"is less than {said}, the least a cap can hold (the kernel counts whole {counted}, and reads 0 "
                "as no cap at all)")
    return None


def _iops(v: Any, what: str) -> int | str:
    if v != UNCAPPED and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_IOPS):
        raise ValueError(f"expected {what} or a list of them, got {show(v)}")
    return v


def _mb_s(v: Any, what: str) -> int | float | str:
    if v != UNCAPPED and (not _number(v) or not 0 < v <= MAX_MB_S):
        raise ValueError(f"expected {what} or a list of them, got {show(v)}")
    too_little = None if v == UNCAPPED else _least_problem(v, "mb_s")
    if too_little:
        raise ValueError(f"{show(v)} MiB a second {too_little}")
    return v


# A credit bucket on a unit's caps (storlab.lab.credits): earned at `baseline` a second, spent up to
# `burst`, `size` credits (IOs, or MiB), `start` of them at each run's start (full when left out).
BUCKET_KEYS = {"iops_bucket": "iops", "mb_s_bucket": "mb_s"}
_BUCKET_WHAT = "{ baseline = …, burst = …, size = …, start = … } (start optional: full)"


def _bucket(v: Any, what: str) -> dict[str, float]:
    if not isinstance(v, dict) or not {"baseline", "burst", "size"} <= set(v) <= {"baseline", "burst", "size", "start"} \
            or not all(_number(x) and 0 <= x for x in v.values()):
        raise ValueError(f"expected {what} or a list of them, got {show(v)}")
    given = {key: float(x) + 0.0 for key, x in v.items()}  # + 0.0: -0.0 is 0, one value with it
    if not 0 < given["baseline"] < given["burst"]:
        raise ValueError(f"a bucket's baseline ({show(v['baseline'])}) must be above 0 and below its burst "
                         f"({show(v['burst'])})")
    if given["size"] <= 0:
        raise ValueError(f"a bucket's size ({show(v['size'])}) must be above 0")
    if given.setdefault("start", given["size"]) > given["size"]:
        raise ValueError(f"a bucket's size ({show(v['size'])}) must be above 0 and hold its start "
                         f"({show(v['start'])})")
    return given


LATENCY_KEYS = latency.KEYS
_LATENCY_WHAT = "milliseconds from 0 (fixed) or { p50 = …, p99 = … }"
# The least time a latency key adds, 0 aside (nothing added): the delay layer's own round trip is some
# 0.03 to 0.13 ms on a 2-core VM, moving with the machine's load, and a declared time below this could not
# be told apart from it. Fixed, so a file passes or fails alike whatever the machine is doing.
MIN_LATENCY_MS = 0.1


def latency_value(v: Any) -> float | dict[str, float]:
    """One latency value, checked as a latency key's (`storlab io` takes them too)."""
    return _latency(v, _LATENCY_WHAT)


def _latency(v: Any, what: str) -> float | dict[str, float]:
    """A latency key's value: milliseconds added to each IO, fixed, or a p50/p99 pair (p99 above p50,
    both above 0) whose lognormal each IO's delay is drawn from; 0, or MIN_LATENCY_MS and more."""
    pair = isinstance(v, dict)
    if pair:
        if set(v) != {"p50", "p99"} or not all(_ms(x) and x > 0 for x in v.values()):
            raise ValueError(f"expected {what} or a list of them, got {show(v)}")
        if v["p99"] <= v["p50"]:
            raise ValueError(f"p99 ({show(v['p99'])}) must be above p50 ({show(v['p50'])}); a fixed latency is one number")
    elif not _ms(v):
        raise ValueError(f"expected {what} or a list of them, got {show(v)}")
    p50 = v["p50"] if pair else v
    if 0 < p50 < MIN_LATENCY_MS:
        raise ValueError(f"{'p50 ' if pair else ''}{show(p50)} ms is below {MIN_LATENCY_MS:g} ms: the delay layer's "
                         "own round trip is some 0.03 to 0.13 ms on a 2-core VM, and a declared time below "
                         f"{MIN_LATENCY_MS:g} ms could not be told apart from it; declare 0 (nothing added) or at "
                         f"least {MIN_LATENCY_MS:g} ms")
    # + 0.0: -0.0 is 0, one value with it (two cells of one latency otherwise)
    return {"p50": float(v["p50"]), "p99": float(v["p99"])} if pair else float(v) + 0.0


def _ms(v: Any) -> bool:
    return _number(v) and 0 <= v <= latency.MAX_MS


class CapKeys(BaseModel):
    """IO caps on the device under a placement, each a factor when a list: `write_iops = [3000, 16000]`.
    `iops` and `mb_s` cap both directions alike."""

    model_config = ConfigDict(extra="forbid")

    read_iops: int | str | list[int | str] | None = None
    write_iops: int | str | list[int | str] | None = None
    iops: int | str | list[int | str] | None = None
    read_mb_s: int | float | str | list[int | float | str] | None = None
    write_mb_s: int | float | str | list[int | float | str] | None = None
    mb_s: int | float | str | list[int | float | str] | None = None
    iops_bucket: dict | list[dict] | None = None
    mb_s_bucket: dict | list[dict] | None = None

    @field_validator("iops_bucket", "mb_s_bucket", mode="before")
    @classmethod
    def _bucket(cls, v, info):
        if v is None:
            return None
        checked = factors.factor(v, _bucket, _BUCKET_WHAT)
        unit = BUCKET_KEYS[info.field_name]
        limit = MAX_IOPS if unit == "iops" else MAX_MB_S
        for bucket in factors.values(checked):
            too_little = _least_problem(bucket["baseline"], unit)  # its burst is above its baseline
            if too_little:
                raise ValueError(f"a bucket's baseline ({bucket['baseline']:g}) {too_little}")
            if bucket["burst"] > limit:
                raise ValueError(f"a bucket's burst above {limit:,} is no device's")
        return checked

    @field_validator("read_iops", "write_iops", "iops", mode="before")
    @classmethod
    def _iops(cls, v):
        return None if v is None else factors.factor(
            v, _iops, f'a whole number of IOs a second from 1 to {MAX_IOPS:,} (or "max": uncapped)')

    @field_validator("read_mb_s", "write_mb_s", "mb_s", mode="before")
    @classmethod
    def _mb_s(cls, v):
        return None if v is None else factors.factor(v, _mb_s, 'MiB a second, a number above 0 (or "max": uncapped)')

    @model_validator(mode="after")
    def _one_way(self):
        """A direction is capped once: by its own key or by the shorthand for both."""
        for both, (read, write) in caps.SHORTHANDS.items():
            given = [key for key in (read, write) if getattr(self, key) is not None]
            if getattr(self, both) is not None and given:
                raise KeyProblem((both,), f"{both} caps reads and writes alike, and {given[0]} is given too; "
                                 f"give {both}, or {read} and {write}")
        for key, unit in BUCKET_KEYS.items():
            given = [k for k in (unit, *caps.SHORTHANDS[unit]) if getattr(self, k) is not None]
            if getattr(self, key) is not None and given:
                raise KeyProblem((key,), f"{key} sets the {unit} caps of both directions as its credits allow, and "
                                 f"{given[0]} caps them too; give one of them")
        return self

    @property
    def capped(self) -> bool:
        """Some cell's device is capped (a key given a number, in some level of its factor)."""
        return any(v != UNCAPPED for key in CAP_KEYS for v in factors.values(getattr(self, key))
                   if v is not None)

    def cap_factors(self) -> dict[str, list[Any]]:
        return {key: getattr(self, key) for key in CAP_KEYS if isinstance(getattr(self, key), list)}

    def caps(self, chosen: dict[str, Any] | None = None) -> caps.IoCaps:
        """One cell's caps: `chosen` holds a value for each factor key (the matrix's choice); a bucket's
        unit capped at the rate it starts a run with."""
        value = {key: factors.values(getattr(self, key))[0] for key in CAP_KEYS} | \
            {k: v for k, v in (chosen or {}).items() if k in CAP_KEYS}

        def either(own: str, both: str):
            found = value[own] if value[own] is not None else value[both]
            return None if found == UNCAPPED else found

        buckets = tuple(caps.Bucket(unit, **value[key]) for key, unit in BUCKET_KEYS.items() if value[key] is not None)
        held = caps.IoCaps(either("read_iops", "iops"), either("write_iops", "iops"),
                           either("read_mb_s", "mb_s"), either("write_mb_s", "mb_s"), buckets)
        for bucket in buckets:
            held = credits.held(held, bucket, bucket.start_cap)
        return held


class DirectoryPlacement(CapKeys):
    """`disk = { path = "./lab/disk", write_iops = 3000 }`: a directory, as the plain string names one,
    with IO caps on the whole device under it."""

    path: str

    @model_validator(mode="before")
    @classmethod
    def _no_latency(cls, v):
        given = next((k for k in LATENCY_KEYS if isinstance(v, dict) and k in v), None)
        if given is not None:
            raise KeyProblem((given,), "a latency is held by a layer over a device storlab makes, which a "
                             'directory is not: declare it on a device placement, { loop = "4GB", … }')
        return v

    @field_validator("path", mode="before")
    @classmethod
    def _path(cls, v):
        if not isinstance(v, str) or not v:
            raise ValueError(f"expected a directory path, got {show(v)}")
        return v

    @model_validator(mode="after")
    def _a_device(self):
        if self.path == placements.TMPFS and self.capped:
            key = next(k for k in CAP_KEYS if getattr(self, k) is not None)
            raise KeyProblem((key,), "tmpfs is memory: it has no device to cap")
        return self


class DevicePlacement(CapKeys):
    """`fast = { loop = "4GB", sector = [512, 4096], fs = "ext4", … }`: a loop device storlab makes
    and removes (storlab.lab.devices), with IO caps on it (CapKeys) if asked. A key left out is None
    here (the identity of an experiment is what its file says) and its default when the device is made."""

    loop: str  # the image's size, as written
    image_dir: str | None = None
    sector: int | list[int] | None = None
    fs: str | list[str] | None = None
    mount_options: str | list[str] | None = None
    read_ahead_kb: int | list[int] | None = None
    max_sectors_kb: int | list[int] | None = None
    allow_tmpfs: bool | None = None
    read_latency_ms: float | dict | list[float | dict] | None = None
    write_latency_ms: float | dict | list[float | dict] | None = None
    flush_latency_ms: float | dict | list[float | dict] | None = None

    @field_validator(*LATENCY_KEYS, mode="before")
    @classmethod
    def _latency(cls, v):
        return None if v is None else factors.factor(v, _latency, _LATENCY_WHAT)

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

    @field_validator("max_sectors_kb", mode="before")
    @classmethod
    def _max_sectors(cls, v):
        return None if v is None else factors.factor(v, _max_sectors_kb, "a whole number of KiB from 4")

    @field_validator("allow_tmpfs", mode="before")
    @classmethod
    def _allow_tmpfs(cls, v):
        if v is not None and not isinstance(v, bool):
            raise ValueError(f"expected true or false, got {show(v)}")
        return v

    @property
    def size_bytes(self) -> int:
        return parse_size(self.loop)

    def device_factors(self) -> dict[str, list[Any]]:
        return {key: getattr(self, key) for key in devices.FACTOR_KEYS if isinstance(getattr(self, key), list)}

    def latency_factors(self) -> dict[str, list[Any]]:
        return {key: getattr(self, key) for key in LATENCY_KEYS if isinstance(getattr(self, key), list)}

    def factors(self) -> dict[str, list[Any]]:
        """The keys given a list: each a factor of the matrix (the device's, its latency, then its caps)."""
        return self.device_factors() | self.latency_factors() | self.cap_factors()

    def latency(self, chosen: dict[str, Any] | None = None) -> latency.DeviceLatency | None:
        """One cell's latency: `chosen` holds a value for each factor key (the matrix's choice). None
        when the table declares none: a latency of 0 is held by the layer too, so the cells of a factor
        with a 0 level differ only in the time added."""
        if all(getattr(self, key) is None for key in LATENCY_KEYS):
            return None
        value = {key: factors.values(getattr(self, key))[0] for key in LATENCY_KEYS} | \
            {k: v for k, v in (chosen or {}).items() if k in LATENCY_KEYS}
        return latency.DeviceLatency(*(latency.NONE if value[key] is None else latency.parse(value[key])
                                       for key in LATENCY_KEYS))

    @property
    def delayed(self) -> bool:
        """The device is served through the delay layer (some latency key is declared)."""
        return any(getattr(self, key) is not None for key in LATENCY_KEYS)

    def spec(self, chosen: dict[str, Any] | None = None) -> devices.DeviceSpec:
        """One cell's device: `chosen` holds a value for each factor key (the matrix's choice)."""
        value = {key: factors.values(getattr(self, key))[0] for key in devices.FACTOR_KEYS} | \
            {k: v for k, v in (chosen or {}).items() if k in devices.FACTOR_KEYS}
        fs = value["fs"] or "ext4"
        return devices.DeviceSpec(
            devices.DeviceFormat(self.size_bytes, value["sector"] or 512, fs, value["mount_options"] or "",
                                 Path(self.image_dir or devices.DEFAULT_IMAGE_DIR)),
            devices.DEFAULT_READ_AHEAD_KB if value["read_ahead_kb"] is None else value["read_ahead_kb"],
            bool(self.allow_tmpfs), value["max_sectors_kb"], self.latency(chosen))

    def specs(self) -> list[devices.DeviceSpec]:
        """Every device the table can ask for, one per combination of its factors' values."""
        choices = self.device_factors()
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


def _max_sectors_kb(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 4:  # a page: the kernel's smallest
        raise ValueError(f"expected {what} or a list of them, got {show(v)}")
    return v


def device(name: str, table: Any) -> DevicePlacement:
    """A device placement's table, validated; KeyProblem naming `placements.NAME.KEY` otherwise."""
    return _table(name, table, DevicePlacement)


def directory(name: str, table: Any) -> DirectoryPlacement:
    """A directory placement's table (`{ path = …, write_iops = … }`), validated the same way."""
    return _table(name, table, DirectoryPlacement)


def _table(name: str, table: Any, model: type[CapKeys]) -> Any:
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
            keys = [k for k in model.model_fields if k not in CAP_KEYS] + list(CAP_KEYS)
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


def cap_table(raw: Placement) -> CapKeys | None:
    """The table whose caps a placement asks, None when it asks none."""
    return raw if isinstance(raw, CapKeys) and raw.capped else None
