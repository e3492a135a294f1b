"""storlab check and the machine facts: recorded /proc and /sys trees of machines with cpufreq, this
machine's real ones (a VM without cpufreq), and a real loop device with 4096-byte sectors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from storlab.errors import UserError
from storlab.lab import cgroups, mounts
from storlab.machine import system
from tests.commands import invoke

DATA = Path(__file__).parent / "data"
INTEL = DATA / "intel-pstate-powersave"
AMD = DATA / "acpi-cpufreq-performance"


def items(report: system.CheckReport, group: str) -> dict[str, system.Item]:
    return {i.name: i for i in report.items if i.group == group}


# -- recorded trees ------------------------------------------------------------------------------


def test_intel_pstate_in_power_saving_is_unfit():
    report = system.check([], root=INTEL, sample=False)

    assert "\n".join(system.render(report)) == """\
State:
  CPU
    OK       model: Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz, 2 logical cores
    OK       virtualization: bare metal
    OK       scaling driver: intel_pstate
    WARNING  governor: powersave
    WARNING  turbo: on
    WARNING  energy performance preference: power
    UNKNOWN  core speed under load: not sampled  (storlab check samples it; the facts recorded with a run do not)
    WARNING  idle states: intel_idle: POLL, C1, C1E, C6
  Memory
    OK       total: 187.5 GiB
    OK       available: 171.7 GiB
    WARNING  transparent huge pages: always
    OK       vm.swappiness: 60
  Kernel
    OK       release: 5.15.0-91-generic

Warnings:
  - CPU governor: powersave: the core slows down between bursts, so IO-bound work runs slower and less evenly
  - CPU turbo: on: the speed follows temperature and how many cores are busy: noisier numbers (does not make the machine unfit)
  - CPU energy performance preference: power: the hardware is told to favour saving power over speed
  - CPU idle states: intel_idle: POLL, C1, C1E, C6: C6 is enabled and takes 133 µs to leave: added to IO completions on an idle core (does not make the machine unfit)
  - Memory transparent huge pages: always: compaction stalls show up as latency spikes in database servers (does not make the machine unfit)

Advice:
  - CPU governor: cpupower frequency-set -g performance (and set the BIOS power profile to performance)
  - CPU turbo: echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo (or 0 > cpufreq/boost) for steadier runs
  - CPU energy performance preference: echo performance > /sys/devices/system/cpu/cpu*/cpufreq/energy_performance_preference
  - CPU idle states: disable deep C-states in the BIOS, or cpupower idle-set -D 20
  - Memory transparent huge pages: echo madvise > /sys/kernel/mm/transparent_hugepage/enabled

Not fit to benchmark: 2 warnings would distort results."""
    cpu = items(report, "CPU")
    assert cpu["governor"].distorts and cpu["energy performance preference"].distorts
    assert not cpu["turbo"].distorts and not cpu["idle states"].distorts
    assert not report.fit


def test_busy_core_below_rated_speed_is_power_saving():
    """The CPU-Z check: the recorded core stays at 1000 MHz under load, rated 2100 MHz."""
    report = system.check([], root=INTEL, sample=True)

    speed = items(report, "CPU")["core speed under load"]
    assert speed.value == "1000 MHz busy, 48% of rated 2100 MHz"
    assert (speed.state, speed.distorts) == ("warning", True)


def test_tuned_server_is_fit():
    report = system.check([], root=AMD, sample=True)

    cpu = items(report, "CPU")
    assert {name: item.state for name, item in cpu.items()} == {
        "model": "ok", "virtualization": "ok", "scaling driver": "ok", "governor": "ok", "turbo": "ok",
        "energy performance preference": "ok", "core speed under load": "ok", "idle states": "ok",
    }
    assert cpu["idle states"].value == "acpi_idle: POLL, C1, C2 (disabled)"
    assert cpu["core speed under load"].value == "2995 MHz busy, 100% of rated 3000 MHz"
    assert report.fit
    assert system.render(report)[-1] == "Fit to benchmark."


def test_planned_memory_that_does_not_fit_is_a_distorting_warning():
    available = system.collect_facts([], root=AMD)["memory"]["available_bytes"]

    fits = items(system.check([], available, root=AMD, sample=False), "Memory")["available"]
    too_big = items(system.check([], available + 1, root=AMD, sample=False), "Memory")["available"]

    assert fits.state == "ok"
    assert (too_big.state, too_big.distorts) == ("warning", True)


def test_mount_is_the_longest_mount_point_holding_the_path():
    assert mounts.mount_of(Path("/data/pg wal/0001"), INTEL)["mount_point"] == "/data/pg wal"
    assert mounts.mount_of(Path("/data/base"), INTEL)["filesystem"] == "xfs"
    assert mounts.mount_of(Path("/database"), INTEL)["mount_point"] == "/"
    assert mounts.mount_of(Path("/data"), INTEL)["options"] == \
        "rw,noatime,attr2,inode64,logbufs=8,logbsize=32k,noquota"


def test_partition_resolves_to_its_disk():
    """The recorded / is on nvme0n1p2; the facts are the whole disk's."""
    facts = system.collect_facts([Path("/")], root=INTEL)["paths"]["/"]

    assert mounts.block_device_of(Path("/"), INTEL) == "nvme0n1"
    assert {k: facts[k] for k in ("device", "model", "logical_block_size", "scheduler", "filesystem")} == {
        "device": "nvme0n1", "model": "Dell Express Flash PM1725b 1.6TB SFF", "logical_block_size": 512,
        "scheduler": "none", "filesystem": "ext4",
    }


def test_differences_name_what_changed_between_machines():
    intel = system.comparable(system.collect_facts([], root=INTEL))
    amd = system.comparable(system.collect_facts([], root=AMD))

    assert system.differences(amd, intel) == [
        "cpu.energy_performance_preference: None -> power",
        "cpu.governor: performance -> powersave",
        "cpu.model: AMD EPYC 7302 16-Core Processor -> Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz",
        "cpu.scaling_driver: acpi-cpufreq -> intel_pstate",
        "cpu.turbo: False -> True",
        "kernel: 6.1.0-17-amd64 -> 5.15.0-91-generic",
    ]
    assert system.differences(intel, intel) == []


# -- this machine --------------------------------------------------------------------------------

no_cpufreq = pytest.mark.skipif(Path("/sys/devices/system/cpu/cpu0/cpufreq").exists(),
                                reason="this machine has cpufreq: the VM expectations do not apply")


@no_cpufreq
def test_frequency_facts_of_this_vm_are_unknown_never_ok():
    report = system.check([Path("/")])

    cpu = items(report, "CPU")
    for name in ("scaling driver", "governor", "turbo", "energy performance preference", "core speed under load"):
        assert cpu[name].state == "unknown"
        assert cpu[name].value == "unknown (virtualized)"
        assert "no cpufreq in sysfs" in cpu[name].reason
    assert cpu["virtualization"].value.startswith("virtual machine (")


def _expected_device_of_root() -> dict:
    """Computed another way: findmnt for the filesystem, /sys/block/*/dev (and partitions) for the
    device number, the queue files read directly."""
    source, fstype = subprocess.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "/"], capture_output=True,
                                    text=True, check=True).stdout.split()
    st = os.stat("/")
    number = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    disk = None
    for dev_file in [*Path("/sys/block").glob("*/dev"), *Path("/sys/block").glob("*/*/dev")]:
        if dev_file.read_text().strip() == number:
            disk = dev_file.parent.name if dev_file.parent.parent.name == "block" else dev_file.parent.parent.name
    queue = Path("/sys/block") / disk / "queue"
    scheduler = queue.joinpath("scheduler").read_text()
    return {
        "device": disk,
        "filesystem": fstype,
        "logical_block_size": int(queue.joinpath("logical_block_size").read_text()),
        "physical_block_size": int(queue.joinpath("physical_block_size").read_text()),
        "rotational": queue.joinpath("rotational").read_text().strip() == "1",
        "read_ahead_kb": int(queue.joinpath("read_ahead_kb").read_text()),
        "write_cache": queue.joinpath("write_cache").read_text().strip(),
        "scheduler": scheduler.split("[")[1].split("]")[0] if "[" in scheduler else scheduler.strip(),
    }


def test_device_facts_of_root_match_sysfs_and_mountinfo():
    expected = _expected_device_of_root()

    facts = system.collect_facts([Path("/")])["paths"]["/"]

    assert {k: facts[k] for k in expected} == expected
    assert mounts.block_device_of(Path("/")) == expected["device"]


def test_tmpfs_says_it_is_memory():
    facts = system.collect_facts([Path("/dev/shm")])["paths"]["/dev/shm"]

    assert (facts["filesystem"], facts["device"]) == ("tmpfs", "memory (tmpfs)")


def test_check_command_exit_code_says_whether_fit():
    result = invoke("check", "/", "--json")

    report = json.loads(result.output)
    assert result.exit_code == (0 if report["fit"] else 2)
    assert report["facts"]["paths"]["/"]["device"] == _expected_device_of_root()["device"]


@no_cpufreq
def test_check_command_text_on_this_vm():
    result = invoke("check", "/")

    assert result.exit_code == 0, result.output
    assert "    UNKNOWN  governor: unknown (virtualized)  (no cpufreq in sysfs: in a guest the hypervisor sets the frequency)" \
        in result.output.splitlines()
    assert result.output.splitlines()[-1] == "Fit to benchmark."


def test_a_path_that_does_not_exist_is_the_users_error():
    with pytest.raises(UserError, match="/no/such/place: no such file or directory"):
        system.check([Path("/no/such/place")])

    result = invoke("check", "/no/such/place")
    assert (result.exit_code, result.output) == (2, "storlab: /no/such/place: no such file or directory\n")


# -- a loop device with 4096-byte logical sectors --------------------------------------------------


def _sh(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()


@contextmanager
def loop_device(image: Path, mount_point: Path, sector_size: int):
    """A loop device over `image`, formatted ext4 and mounted; unmounted and detached whatever happens."""
    device, mounted = None, False
    try:
        try:
            device = _sh("losetup", "--find", "--show", "--sector-size", str(sector_size), str(image))
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"losetup cannot attach a loop device here: {exc.stderr.strip()}")
        _sh("mkfs.ext4", "-q", "-F", device)
        mount_point.mkdir()
        _sh("mount", device, str(mount_point))
        mounted = True
        yield device
    finally:
        if mounted:
            subprocess.run(["umount", str(mount_point)], check=False)
        if device:
            subprocess.run(["losetup", "-d", device], check=False)


@pytest.mark.device
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("losetup") or not shutil.which("mkfs.ext4"),
                    reason="needs root, losetup and mkfs.ext4")
def test_loop_device_with_4096_byte_sectors(tmp_path):
    image = tmp_path / "disk.img"
    with image.open("wb") as f:
        f.truncate(512 * 2**20)
    mount_point = tmp_path / "mnt"

    with loop_device(image, mount_point, 4096) as device:
        report = system.check([mount_point], sample=False)
        block_device = mounts.block_device_of(mount_point)
        path_items = items(report, str(mount_point))
        facts = report.facts["paths"][str(mount_point)]

    assert _sh("losetup", "-j", str(image)) == "", "the loop device was left attached"
    assert block_device == Path(device).name
    assert path_items["logical sector size"].value == "4096 B"
    assert facts["logical_block_size"] == 4096
    assert facts["loop_backing_file"] == str(image)
    assert facts["backing_device"] == mounts.block_device_of(tmp_path)
    assert path_items["device"].value == f"{Path(device).name} (loop over {image} on {facts['backing_device']})"


def test_check_says_which_engine_servers_are_installed(tmp_path):
    """Each engine's servers (PostgreSQL's 15 and 18) are named with what is installed, or how to install it."""
    result = invoke("check", str(tmp_path), "--json")
    engines = {i["name"]: i for i in json.loads(result.output)["items"] if i["group"] == "Engines"}
    assert set(engines) == {"PostgreSQL 15", "PostgreSQL 18", "MariaDB"}
    for item in engines.values():
        assert item["state"] == "ok" and item["value"] or item["state"] == "unknown" and item["advice"]
    assert "15." in engines["PostgreSQL 15"]["value"]


def test_check_says_whether_instances_get_control_groups(tmp_path):
    """As the kernel says: a group storlab could make here now, or UNKNOWN with why not."""
    result = invoke("check", str(tmp_path), "--json")
    (item,) = [i for i in json.loads(result.output)["items"] if i["group"] == "Lab" and i["name"] == "control groups"]
    found = cgroups.hierarchy()
    if os.geteuid() == 0 and found is not None and os.access(found.own, os.W_OK):
        assert item["state"] == "ok" and str(found.own) in item["value"]
        probe = cgroups.ControlGroup.make(found.group(cgroups.PREFIX + "checktest"))
        assert probe is not None and probe.remove()
    else:
        assert item["state"] == "unknown" and item["reason"]


def test_check_says_for_each_trace_group_whether_it_can_run_here(tmp_path):
    result = invoke("check", str(tmp_path), "--json")
    traces = {i["name"]: i for i in json.loads(result.output)["items"] if i["group"] == "Traces"}
    assert "the size of every IO (block:block_rq_issue)" in traces
    io = "LWLock waits, writes and syncs of each file (--trace-io)"
    assert {"PostgreSQL 15: lock waits, checkpoints, WAL switches", f"PostgreSQL 15: {io}",
            "PostgreSQL 15: reads of each data file (--trace-reads)"} <= set(traces)
    for item in traces.values():
        assert item["value"] == "can run" and item["state"] == "ok" or item["state"] == "unknown" and item["reason"]
    if f"PostgreSQL 18: {io}" in traces:  # the wheel's server has no trace points
        assert "without trace points" in traces[f"PostgreSQL 18: {io}"]["reason"]
