"""The device's format and queue: its logical sector, its filesystem and mount options (changing any
makes a new device), and what changes in place, its read-ahead and the largest request the block
layer issues (storlab.lab.devices makes and tunes the device)."""

from __future__ import annotations

import re
from typing import Any, Mapping

from storlab import factors
from storlab.factors import show
from storlab.lab import devices
from storlab.volume.property import Key, Observed, Part, Property

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


def _max_sectors_kb(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 4:  # a page: the kernel's smallest
        raise ValueError(f"expected {what} or a list of them, got {show(v)}")
    return v


_WHOLE = {"type": "integer"}


class DeviceFormat(Property):
    name = "format"
    keys = (
        Key("sector", "one of " + ", ".join(map(str, devices.SECTORS)), factors.choice(devices.SECTORS),
            {"enum": list(devices.SECTORS)}),
        Key("fs", "one of " + ", ".join(devices.FILESYSTEMS), factors.choice(devices.FILESYSTEMS),
            {"enum": list(devices.FILESYSTEMS)}),
        Key("mount_options", "mount options", _options, {"type": "string"}),
        Key("read_ahead_kb", "a whole number of KiB >= 0", factors.non_negative_int, _WHOLE | {"minimum": 0}),
        Key("max_sectors_kb", "a whole number of KiB from 4", _max_sectors_kb, _WHOLE | {"minimum": 4}),
    )

    def part(self, declared: Mapping[str, Any], observed: Observed) -> Part | None:
        """The device as the runs read it back (sysfs, the mount table): each state they found once,
        with its count of runs; observed, the state most of them found."""
        states: dict[str, tuple[Mapping[str, Any], int]] = {}
        for c in observed.conditions:
            seen = (c.get("devices") or {}).get(observed.placement)
            if seen:
                text = _seen(seen)
                states[text] = (seen, states.get(text, (seen, 0))[1] + 1)
        if not states:
            return None
        most, runs = max(states.values(), key=lambda s: s[1])
        said = next(iter(states)) if len(states) == 1 else "; ".join(
            f"{text} ({n} run{'s' if n > 1 else ''})" for text, (_, n) in states.items())
        return self.made(observed, declared, said,
                         {k: v for k, v in most.items() if v is not None} | {"runs": runs, "states": len(states)})


def _seen(seen: Mapping[str, Any]) -> str:
    """What a device placement really was in a run (devices.SeenFormat, as the run recorded it)."""
    parts = [f"{seen.get('logical_sector')}-byte sectors" if seen.get("logical_sector") else "sectors unknown",
             f"{seen.get('filesystem') or '?'} ({seen.get('mount_options') or 'options unknown'})",
             f"read-ahead {seen.get('read_ahead_kb')} KiB" if seen.get("read_ahead_kb") is not None else "read-ahead unknown"]
    if seen.get("direct_io") is not None:
        parts.append("direct IO" if seen["direct_io"] else "buffered IO (not direct)")
    if seen.get("max_sectors_kb") is not None:
        parts.append(f"requests up to {seen['max_sectors_kb']} KiB")
    return f"{seen.get('device') or '?'} " + ", ".join(parts)


PROPERTY = DeviceFormat()
