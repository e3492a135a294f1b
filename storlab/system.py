"""Machine facts recorded with every experiment: CPU (and its power saving), memory, and the device
and filesystem behind each placement. Runs on different facts are not comparable."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import psutil


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cpu(root: Path) -> dict:
    cpuinfo = _read(root / "proc/cpuinfo") or ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), None)
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    cpufreq = root / "sys/devices/system/cpu/cpu0/cpufreq"
    facts = {
        "model": model,
        "cores": os.cpu_count(),
        "virtualized": "hypervisor" in flags,
        "governor": _read(cpufreq / "scaling_governor"),
        "scaling_driver": _read(cpufreq / "scaling_driver"),
        "energy_performance_preference": _read(cpufreq / "energy_performance_preference"),
        "max_khz": _read(cpufreq / "cpuinfo_max_freq"),
    }
    no_turbo = _read(root / "sys/devices/system/cpu/intel_pstate/no_turbo")
    boost = _read(root / "sys/devices/system/cpu/cpufreq/boost")
    facts["turbo"] = None if no_turbo is None and boost is None else (no_turbo == "0" if no_turbo is not None else boost == "1")
    return facts


def _mount_of(path: Path, root: Path) -> dict | None:
    """The longest mount point that contains `path`, from mountinfo."""
    best = None
    for line in (_read(root / "proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        mount_point = fields[4].replace("\\040", " ")
        if (str(path) == mount_point or str(path).startswith(mount_point.rstrip("/") + "/")) and (
            best is None or len(mount_point) > len(best["mount_point"])
        ):
            best = {"mount_point": mount_point, "filesystem": tail[0], "source": tail[1],
                    "options": fields[5] + ("," + tail[2] if len(tail) > 2 else ""), "dev": fields[2]}
    return best


def block_device_of(path: Path, root: Path = Path("/")) -> str | None:
    """The whole-disk kernel name behind a path (a partition's parent; a loop device itself)."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    sysdev = root / f"sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if not sysdev.exists():
        return None
    real = sysdev.resolve()
    return real.parent.name if (real / "partition").exists() else real.name


def _device(path: Path, root: Path) -> dict:
    mount = _mount_of(path, root) or {}
    facts: dict = {"path": str(path), "filesystem": mount.get("filesystem"), "mount_options": mount.get("options")}
    try:
        usage = psutil.disk_usage(str(path))
        facts["free_bytes"] = usage.free
    except OSError:
        pass
    if mount.get("filesystem") == "tmpfs":
        facts["device"] = "memory (tmpfs)"
        return facts
    name = block_device_of(path, root)
    facts["device"] = name
    if name:
        queue = root / f"sys/block/{name}/queue"
        facts.update({
            "model": _read(root / f"sys/block/{name}/device/model"),
            "rotational": _read(queue / "rotational"),
            "logical_block_size": _read(queue / "logical_block_size"),
            "physical_block_size": _read(queue / "physical_block_size"),
            "scheduler": _read(queue / "scheduler"),
            "read_ahead_kb": _read(queue / "read_ahead_kb"),
            "write_cache": _read(queue / "write_cache"),
            "loop_backing_file": _read(root / f"sys/block/{name}/loop/backing_file"),
        })
    return facts


def collect_facts(paths: list[Path], root: Path = Path("/")) -> dict:
    memory = psutil.virtual_memory()
    return {
        "kernel": platform.release(),
        "cpu": _cpu(root),
        "memory": {
            "total_bytes": memory.total,
            "available_bytes": memory.available,
            "transparent_hugepage": _read(root / "sys/kernel/mm/transparent_hugepage/enabled"),
            "swappiness": _read(root / "proc/sys/vm/swappiness"),
        },
        "paths": {str(p): _device(Path(p), root) for p in paths},
    }


_COMPARABLE_CPU = ("model", "cores", "governor", "scaling_driver", "turbo", "energy_performance_preference")
_COMPARABLE_PATH = ("device", "model", "logical_block_size", "physical_block_size", "scheduler", "filesystem")


def comparable(facts: dict) -> dict:
    """What must match for two runs to be averaged together."""
    return {
        "kernel": facts.get("kernel"),
        "cpu": {k: facts.get("cpu", {}).get(k) for k in _COMPARABLE_CPU},
        "paths": {p: {k: d.get(k) for k in _COMPARABLE_PATH} for p, d in facts.get("paths", {}).items()},
    }


def differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    """'cpu.governor: performance -> powersave' for every leaf that differs."""
    out = []
    for key in sorted(set(a) | set(b)):
        left, right = a.get(key), b.get(key)
        name = f"{prefix}{key}"
        if isinstance(left, dict) and isinstance(right, dict):
            out += differences(left, right, name + ".")
        elif left != right:
            out.append(f"{name}: {left} -> {right}")
    return out
