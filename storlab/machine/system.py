"""Machine facts and the checks that say whether this machine is fit to benchmark: CPU power saving
(seed 003: four servers in ten had it on by mistake), memory, and the device and filesystem behind
each placement. The facts are recorded with every experiment; runs on different facts are not
comparable.

Every reader takes `root`, the prefix under which /proc and /sys are found, so tests can point it at
a recorded tree from a machine that has what this one lacks (cpufreq, intel_pstate, deep C-states)."""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from storlab import processes
from storlab.errors import UserError
from storlab.volume.added_latency import MIN_LATENCY_MS
from storlab.lab import caps, cgroups, latency
from storlab.lab.mounts import block_device_of, mount_of
from storlab.sizes import format_bytes

OK, WARNING, UNKNOWN = "ok", "warning", "unknown"

# DMI product names of the common hypervisors, for guests whose CPU hides the hypervisor flag.
_VIRTUAL_PRODUCTS = ("KVM", "VMware", "VirtualBox", "HVM domU", "Virtual Machine", "Google Compute Engine",
                     "Standard PC", "Bochs", "BHYVE", "OpenStack Nova", "Cloud Hypervisor", "Firecracker")
# An idle state that takes longer than this to leave adds its exit latency to IO completions that
# arrive while the core sleeps (C6 is ~100 µs; C1/C1E and POLL are a few µs).
_DEEP_IDLE_US = 20
# CPU-Z's check: under load a core should run at its rated speed; seed 003's "75 % of rated" was power saving.
_BUSY_FRACTION_OF_RATED = 0.9


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _cpuinfo_field(cpuinfo: str, name: str) -> str | None:
    return next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                 if line.split(":", 1)[0].strip() == name), None)


def _virtualization(root: Path, cpuinfo: str) -> str | None:
    """The evidence that this is a guest, or None on bare metal."""
    if "hypervisor" in (_cpuinfo_field(cpuinfo, "flags") or "").split():
        return "hypervisor flag in /proc/cpuinfo"
    xen = _read(root / "sys/hypervisor/type")
    if xen:
        return f"/sys/hypervisor/type is {xen}"
    product = _read(root / "sys/class/dmi/id/product_name") or ""
    if any(name.lower() in product.lower() for name in _VIRTUAL_PRODUCTS):
        return f"DMI product name {product!r}"
    return None


def _governors(cpu_dir: Path) -> str | None:
    """One governor, or 'mixed: a, b' when cores disagree (a half-tuned machine)."""
    found = sorted({g for g in (_read(p) for p in cpu_dir.glob("cpu[0-9]*/cpufreq/scaling_governor")) if g})
    if not found:
        return None
    return found[0] if len(found) == 1 else "mixed: " + ", ".join(found)


def _turbo(cpu_dir: Path) -> bool | None:
    no_turbo = _read(cpu_dir / "intel_pstate/no_turbo")
    if no_turbo is not None:
        return no_turbo == "0"
    boost = _read(cpu_dir / "cpufreq/boost")
    return None if boost is None else boost == "1"


def _idle(cpu_dir: Path) -> dict:
    states = []
    for state in sorted((cpu_dir / "cpu0/cpuidle").glob("state[0-9]*"), key=lambda p: int(p.name[5:])):
        states.append({"name": _read(state / "name"), "latency_us": _int(_read(state / "latency")),
                       "disabled": _read(state / "disable") == "1"})
    return {"driver": _read(cpu_dir / "cpuidle/current_driver"),
            "governor": _read(cpu_dir / "cpuidle/current_governor_ro") or _read(cpu_dir / "cpuidle/current_governor"),
            "states": states}


def _cpu(root: Path) -> dict:
    cpuinfo = _read(root / "proc/cpuinfo") or ""
    cpu_dir = root / "sys/devices/system/cpu"
    cpufreq = cpu_dir / "cpu0/cpufreq"
    return {
        "model": _cpuinfo_field(cpuinfo, "model name"),
        "cores": sum(1 for line in cpuinfo.splitlines() if line.split(":", 1)[0].strip() == "processor"),
        "virtualized": _virtualization(root, cpuinfo),
        "cpufreq": cpufreq.is_dir(),
        "scaling_driver": _read(cpufreq / "scaling_driver"),
        "governor": _governors(cpu_dir),
        "turbo": _turbo(cpu_dir),
        "energy_performance_preference": _read(cpufreq / "energy_performance_preference"),
        "max_khz": _int(_read(cpufreq / "cpuinfo_max_freq")),
        # The rated (stock) speed CPU-Z compares with; intel_pstate publishes it, others only the maximum.
        "base_khz": _int(_read(cpufreq / "base_frequency")),
        "idle": _idle(cpu_dir),
    }


def _memory(root: Path) -> dict:
    meminfo = {}
    for line in (_read(root / "proc/meminfo") or "").splitlines():
        name, _, rest = line.partition(":")
        value = _int(rest.split()[0]) if rest.split() else None
        if value is not None:
            meminfo[name] = value * 1024
    thp = _read(root / "sys/kernel/mm/transparent_hugepage/enabled")
    return {
        "total_bytes": meminfo.get("MemTotal"),
        "available_bytes": meminfo.get("MemAvailable"),
        "swap_bytes": meminfo.get("SwapTotal"),
        # The active choice is the bracketed one: "always [madvise] never".
        "transparent_hugepage": _bracketed(thp),
        "swappiness": _int(_read(root / "proc/sys/vm/swappiness")),
    }


def _bracketed(text: str | None) -> str | None:
    if text and "[" in text:
        return text[text.index("[") + 1:text.index("]")]
    return text


def _device_facts(name: str, root: Path) -> dict:
    block = root / "sys/block" / name
    queue = block / "queue"
    rotational = _read(queue / "rotational")
    backing = _read(block / "loop/backing_file")
    return {
        "device": name,
        "model": _read(block / "device/model"),
        "rotational": None if rotational is None else rotational == "1",
        "logical_block_size": _int(_read(queue / "logical_block_size")),
        "physical_block_size": _int(_read(queue / "physical_block_size")),
        "scheduler": _bracketed(_read(queue / "scheduler")),
        "read_ahead_kb": _int(_read(queue / "read_ahead_kb")),
        "write_cache": _read(queue / "write_cache"),
        # What an IO cap here holds (the whole disk, by its number) and counts (requests up to this size).
        "dev": _read(block / "dev"),
        "max_sectors_kb": _int(_read(queue / "max_sectors_kb")),
        "loop_backing_file": backing,
        # The disk that really does the IO of a loop device or a device-mapper/md volume.
        "backing_device": block_device_of(Path(backing), root) if backing else None,
        "slaves": sorted(p.name for p in (block / "slaves").glob("*")) or None,
    }


def _path_facts(path: Path, root: Path) -> dict:
    mount = mount_of(path, root) or {}
    facts: dict = {"path": str(path), "mount_point": mount.get("mount_point"), "filesystem": mount.get("filesystem"),
                   "mount_options": mount.get("options"), "source": mount.get("source")}
    try:
        facts["free_bytes"] = psutil.disk_usage(str(path)).free
    except OSError:
        facts["free_bytes"] = None
    if facts["filesystem"] == "tmpfs":
        facts["device"] = "memory (tmpfs)"
        return facts
    name = block_device_of(path, root)
    facts.update(_device_facts(name, root) if name else {"device": None})
    return facts


def collect_facts(paths: list[Path], root: Path = Path("/")) -> dict:
    """What is cheap to read: no sampling, so `storlab run` can call it before every experiment."""
    return {
        "kernel": _read(root / "proc/sys/kernel/osrelease"),
        "cpu": _cpu(root),
        "memory": _memory(root),
        "paths": {str(p): _path_facts(Path(p), root) for p in paths},
    }


_COMPARABLE_CPU = ("model", "cores", "governor", "scaling_driver", "turbo", "energy_performance_preference")
_COMPARABLE_PATH = ("device", "model", "logical_block_size", "physical_block_size", "scheduler", "filesystem")


def comparable(facts: dict) -> dict:
    """What must match for two runs to be averaged together; nothing that drifts (free space, memory
    available) belongs here."""
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


# -- the busy-core frequency (CPU-Z's "core speed") --------------------------------------------

_SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"


def busy_khz(root: Path = Path("/"), cpu: int = 0, seconds: float = 0.5) -> int | None:
    """The highest scaling_cur_freq of `cpu` while a child spins on it: an idle core reports its
    power-saving speed, which says nothing about the speed under load."""
    cur = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"
    if _read(cur) is None:
        return None
    spinner = processes.start([sys.executable, "-c", _SPIN.format(seconds=seconds)])
    try:
        os.sched_setaffinity(spinner.pid, {cpu})
        seen = []
        # Governors ramp up over tens of ms: read through the whole spin and keep the top.
        while spinner.poll() is None:
            seen.append(_int(_read(cur)) or 0)
            time.sleep(0.05)
        return max(seen, default=None) or None
    finally:
        processes.stop(spinner, signal.SIGKILL)


# -- the check ---------------------------------------------------------------------------------


@dataclass
class Item:
    group: str
    name: str
    value: str
    state: str = OK
    reason: str = ""
    advice: str = ""
    # A warning that distorts results makes the machine unfit; the others only add noise or context.
    distorts: bool = False


@dataclass
class CheckReport:
    items: list[Item]
    facts: dict = field(default_factory=dict)

    @property
    def fit(self) -> bool:
        return not any(i.state == WARNING and i.distorts for i in self.items)

    def as_dict(self) -> dict:
        return {"fit": self.fit, "items": [asdict(i) for i in self.items], "facts": self.facts}


def _cpu_items(cpu: dict, busy: int | None) -> list[Item]:
    g = "CPU"
    items = [Item(g, "model", f"{cpu['model']}, {cpu['cores']} logical cores")]
    if cpu["virtualized"]:
        items.append(Item(g, "virtualization", f"virtual machine ({cpu['virtualized']})", WARNING,
                          "the host's power saving and its other guests are invisible from here",
                          "benchmark on bare metal, or check the host's BIOS and governor"))
    else:
        items.append(Item(g, "virtualization", "bare metal"))
    if not cpu["cpufreq"]:
        why = ("no cpufreq in sysfs: in a guest the hypervisor sets the frequency" if cpu["virtualized"]
               else "no cpufreq in sysfs: no scaling driver is loaded, or the BIOS owns the frequency")
        value = "unknown (virtualized)" if cpu["virtualized"] else "unknown (no cpufreq)"
        items += [Item(g, name, value, UNKNOWN, why)
                  for name in ("scaling driver", "governor", "turbo", "energy performance preference",
                               "core speed under load")]
    else:
        items += _cpufreq_items(cpu, busy)
    items.append(_idle_item(cpu["idle"]))
    return items


def _cpufreq_items(cpu: dict, busy: int | None) -> list[Item]:
    g = "CPU"
    items = [Item(g, "scaling driver", cpu["scaling_driver"] or "unknown", OK if cpu["scaling_driver"] else UNKNOWN)]
    governor = cpu["governor"]
    if governor == "performance":
        items.append(Item(g, "governor", governor))
    else:
        items.append(Item(g, "governor", governor or "unknown", WARNING if governor else UNKNOWN,
                          "the core slows down between bursts, so IO-bound work runs slower and less evenly",
                          "cpupower frequency-set -g performance (and set the BIOS power profile to performance)",
                          distorts=bool(governor)))
    turbo = cpu["turbo"]
    if turbo is None:
        items.append(Item(g, "turbo", "unknown", UNKNOWN, "neither intel_pstate/no_turbo nor cpufreq/boost exists"))
    elif turbo:
        items.append(Item(g, "turbo", "on", WARNING, "the speed follows temperature and how many cores are busy: noisier numbers",
                          "echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo (or 0 > cpufreq/boost) for steadier runs"))
    else:
        items.append(Item(g, "turbo", "off"))
    epp = cpu["energy_performance_preference"]
    if epp is None or epp == "performance":
        items.append(Item(g, "energy performance preference", epp or "not offered by this driver"))
    else:
        items.append(Item(g, "energy performance preference", epp, WARNING,
                          "the hardware is told to favour saving power over speed",
                          "echo performance > /sys/devices/system/cpu/cpu*/cpufreq/energy_performance_preference",
                          distorts=epp in ("power", "balance_power")))
    rated = cpu["base_khz"] or cpu["max_khz"]
    if busy is None or not rated:
        items.append(Item(g, "core speed under load", "not sampled", UNKNOWN,
                          "storlab check samples it; the facts recorded with a run do not"))
    else:
        share = busy / rated
        value = f"{busy / 1000:.0f} MHz busy, {share:.0%} of rated {rated / 1000:.0f} MHz"
        if share < _BUSY_FRACTION_OF_RATED:
            items.append(Item(g, "core speed under load", value, WARNING, "a busy core runs below its rated speed: power saving is on",
                              "set the BIOS power profile to maximum performance", distorts=True))
        else:
            items.append(Item(g, "core speed under load", value))
    return items


def _idle_item(idle: dict) -> Item:
    states = idle["states"]
    if not states:
        return Item("CPU", "idle states", "unknown", UNKNOWN, "no cpu0/cpuidle in sysfs")
    names = ", ".join(f"{s['name']}{' (disabled)' if s['disabled'] else ''}" for s in states)
    value = f"{idle['driver'] or 'unknown driver'}: {names}"
    deep = [s for s in states if not s["disabled"] and (s["latency_us"] or 0) > _DEEP_IDLE_US]
    if deep:
        worst = max(deep, key=lambda s: s["latency_us"])
        return Item("CPU", "idle states", value, WARNING,
                    f"{worst['name']} is enabled and takes {worst['latency_us']} µs to leave: added to IO completions on an idle core",
                    "disable deep C-states in the BIOS, or cpupower idle-set -D 20")
    return Item("CPU", "idle states", value)


def _gib(n: int | None) -> str:
    return "unknown" if n is None else format_bytes(n, 1)


def _memory_items(memory: dict, planned: int | None) -> list[Item]:
    g = "Memory"
    items = [Item(g, "total", _gib(memory["total_bytes"]))]
    available = memory["available_bytes"]
    if planned is not None and available is not None and planned > available:
        items.append(Item(g, "available", f"{_gib(available)}, planned {_gib(planned)}", WARNING,
                          "the experiment's planned database memory does not fit: the kernel will swap or reclaim cache mid-run",
                          "lower the engine's memory settings or free memory", distorts=True))
    else:
        items.append(Item(g, "available", _gib(available) + (f", planned {_gib(planned)}" if planned is not None else "")))
    thp = memory["transparent_hugepage"]
    if thp == "always":
        items.append(Item(g, "transparent huge pages", thp, WARNING,
                          "compaction stalls show up as latency spikes in database servers",
                          "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"))
    else:
        items.append(Item(g, "transparent huge pages", thp or "unknown", OK if thp else UNKNOWN))
    items.append(Item(g, "vm.swappiness", str(memory["swappiness"]) + ("" if memory["swap_bytes"] else " (no swap)")))
    return items


def _path_items(facts: dict) -> list[Item]:
    g = facts["path"]
    items = [Item(g, "filesystem", f"{facts['filesystem']} on {facts['mount_point']} ({facts['mount_options']})",
                  OK if facts["filesystem"] else UNKNOWN),
             Item(g, "free space", _gib(facts["free_bytes"]))]
    if facts["device"] == "memory (tmpfs)":
        items.append(Item(g, "device", "memory (tmpfs)", WARNING,
                          "files here live in RAM: IO measures memory, not a device (and direct IO is accepted since Linux 6.6)"))
        return items
    if facts["device"] is None:
        items.append(Item(g, "device", "unknown", UNKNOWN, f"no block device behind {facts['source']}"))
        return items
    device = facts["device"]
    if facts["loop_backing_file"]:
        device += f" (loop over {facts['loop_backing_file']} on {facts['backing_device'] or 'an unknown device'})"
    elif facts["slaves"]:
        device += f" (over {', '.join(facts['slaves'])})"
    items.append(Item(g, "device", device))
    items.append(Item(g, "model", facts["model"], OK) if facts["model"] else
                 Item(g, "model", "unknown", UNKNOWN, "sysfs names no model (virtual and loop devices have none)"))
    rotational = facts["rotational"]
    items.append(Item(g, "rotational (kernel's claim)", "unknown" if rotational is None else ("yes" if rotational else "no"),
                      OK if rotational is not None else UNKNOWN))
    for key, name, unit in (("logical_block_size", "logical sector size", " B"),
                            ("physical_block_size", "physical sector size", " B"),
                            ("scheduler", "scheduler", ""), ("read_ahead_kb", "read-ahead", " KiB"),
                            ("write_cache", "write cache", "")):
        value = facts[key]
        items.append(Item(g, name, f"{value}{unit}") if value is not None else
                     Item(g, name, "unknown", UNKNOWN, f"no queue/{key} in sysfs"))
    if facts.get("dev"):
        largest = f", counting requests of up to {facts['max_sectors_kb']} KiB (max_sectors_kb)" \
            if facts.get("max_sectors_kb") else ""
        items.append(Item(g, "an IO cap here holds", f"the whole of {facts['device']} ({facts['dev']}): every "
                          f"placement on it{largest}"))
    return items


def check(paths: list[Path], planned_memory_bytes: int | None = None, root: Path = Path("/"),
          sample: bool = True) -> CheckReport:
    """Every fact as OK, warning or unknown. `sample` spins a core for half a second to read its speed
    under load; tests on a recorded tree turn it off."""
    for path in paths:
        if not Path(path).exists():
            raise UserError(f"{path}: no such file or directory")
    facts = collect_facts([Path(p) for p in paths], root)
    busy = busy_khz(root) if sample and facts["cpu"]["cpufreq"] else None
    if busy is not None:
        facts["cpu"]["busy_khz"] = busy
    return assess(facts, planned_memory_bytes)


def engine_items(installations: list[tuple[str, str | None, str]]) -> list[Item]:
    """Which servers storlab runs (each engine's versions) are installed here: not a fitness question,
    so a missing one is unknown, with how to install it."""
    return [Item("Engines", name, found) if found else Item("Engines", name, "not installed", UNKNOWN, advice)
            for name, found, advice in installations]


def lab_items() -> list[Item]:
    """What storlab itself can do here: keep each instance's processes in a control group of its own
    (without one, a program an instance's server started could outlive it), and hold them to IO caps
    and a memory limit (and what a cap holds back). Not a fitness question."""
    why = cgroups.unavailable()
    if why is not None:
        return [Item("Lab", "control groups", "none", UNKNOWN, why,
                     "each instance's end kills its process tree only; run storlab as root on a host with a cgroup mount")]
    found = cgroups.hierarchy()
    kind = "v2" if found.version == 2 else f"v1 ({found.mount.name})"
    items = [Item("Lab", "control groups", f"{kind}, under {found.own}: every instance's processes in a group of its own")]
    for name, io, what in (("IO caps", True, f"a cap holds {caps.COVERS[found.version]}"),
                           ("server memory limits", False, "the page cache charged to the group that first reads a page")):
        why = cgroups.limits_unavailable(io, not io)
        items.append(Item("Lab", name, f"{cgroups.where_limits_go(io, not io)}: {what}") if why is None else
                     Item("Lab", name, "cannot be set", UNKNOWN, why,
                          "an experiment that asks for them is refused here; run it on a host with cgroup v2, or v1's "
                          f"{'blkio' if io else 'memory'} hierarchy"))
    return items


def latency_items() -> list[Item]:
    """Which way a device placement's declared latency is held here, and the layer's measured floor: a
    fact, which moves with the machine's load; what a file may declare is the fixed
    added_latency.MIN_LATENCY_MS. Not a fitness question."""
    dm = ("device-mapper's delay target is here too (storlab does not use it yet)" if latency.device_mapper_delay()
          else "no device-mapper delay target here")
    why = latency.unavailable()
    if why is not None:
        return [Item("Lab", "device latency", "cannot be held", UNKNOWN, f"{why}; {dm}",
                     "an experiment that declares a latency is refused here")]
    found = latency.floor()
    return [Item("Lab", "device latency", f"held by storlab's FUSE delay layer ({dm}); its floor: "
                 f"+{found.added_ms:.3f} ms a 4 KiB direct read at 0 ms declared, {found.cpu_us:.0f} µs of CPU an IO; "
                 f"a declared latency under {MIN_LATENCY_MS:g} ms is refused, whatever the floor measured here")]


def trace_items(groups: list[tuple[str, str | None]]) -> list[Item]:
    """Which of what a run traces can run here (each group named, with why not): where one cannot, the
    runs keep their sampled figures and say why. Not a fitness question."""
    return [Item("Traces", name, "can run") if why is None else Item("Traces", name, "cannot run", UNKNOWN, why)
            for name, why in groups]


def assess(facts: dict, planned_memory_bytes: int | None = None) -> CheckReport:
    """The check's verdict on facts already collected (the report judges the facts recorded with the
    runs). Raises KeyError for facts that are not collect_facts' (a store from before they were)."""
    items = _cpu_items(facts["cpu"], facts["cpu"].get("busy_khz")) + _memory_items(facts["memory"], planned_memory_bytes)
    items.append(Item("Kernel", "release", facts["kernel"] or "unknown", OK if facts["kernel"] else UNKNOWN))
    for path_facts in facts["paths"].values():
        items += _path_items(path_facts)
    return CheckReport(items, facts)


_MARK = {OK: "OK", WARNING: "WARNING", UNKNOWN: "UNKNOWN"}


def render(report: CheckReport) -> list[str]:
    """pyperf `system show` style: the state of everything, then the warnings, then what to do."""
    lines = ["State:"]
    group = None
    for item in report.items:
        if item.group != group:
            group = item.group
            lines.append(f"  {group}")
        detail = f"  ({item.reason})" if item.state == UNKNOWN and item.reason else ""
        lines.append(f"    {_MARK[item.state]:<8} {item.name}: {item.value}{detail}")
    warnings = [i for i in report.items if i.state == WARNING]
    if warnings:
        lines += ["", "Warnings:"]
        lines += [f"  - {i.group} {i.name}: {i.value}: {i.reason}{'' if i.distorts else ' (does not make the machine unfit)'}"
                  for i in warnings]
    advice = [i for i in warnings if i.advice]
    if advice:
        lines += ["", "Advice:"]
        lines += [f"  - {i.group} {i.name}: {i.advice}" for i in advice]
    lines.append("")
    distorting = sum(1 for i in warnings if i.distorts)
    lines.append("Fit to benchmark." if report.fit else
                 f"Not fit to benchmark: {distorting} warning{'s' if distorting > 1 else ''} would distort results.")
    return lines
