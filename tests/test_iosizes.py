"""The size of every IO, traced on real loop devices with bpftrace: the right bucket and direction,
only the placements' devices, the tracer gone on every path, and the diskstats averages without it."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from storlab.lab.devices import DevicePool
from storlab.probes import bpftrace, iosizes
from storlab.probes.iosizes import AVERAGE, TRACED, IoSizeTracer, device_numbers
from tests.devicetools import child, device_spec, gone, needs_root, read_line, wait_gone

KIB, MIB = 2**10, 2**20


def test_the_program_filters_by_the_kernels_device_number():
    text = iosizes.program(["7:3", "259:1", "7:3"])
    assert f"args->dev == {7 << 20 | 3} || args->dev == {259 << 20 | 1}" in text
    assert text.count("hist(args->bytes)") == 2 and "printf" not in text  # nothing printed per event


def test_bpftraces_maps_become_buckets_per_placement_and_direction():
    """bpftrace -f json output as it prints its maps (recorded here, 0.17)."""
    dev = 7 << 20 | 3
    output = "\n".join([
        '{"type": "attached_probes", "data": {"probes": 1}}',
        "__BPFTRACE_NOTIFY_PROBES_ATTACHED",
        json.dumps({"type": "hist", "data": {"@read": {str(dev): [
            {"min": 4096, "max": 8191, "count": 12}, {"min": 8192, "max": 16383, "count": 0},
            {"min": 131072, "max": 262143, "count": 3}]}}}),
        json.dumps({"type": "hist", "data": {"@write": {str(dev): [{"min": 1048576, "max": 2097151, "count": 257}]}}}),
    ])
    tracer = IoSizeTracer({"fast": "7:3", "idle": "7:4"})
    assert tracer.sizes(bpftrace.parse(output)) == {"fast": {"read": {4096: 12, 131072: 3}, "write": {1048576: 257}},
                                     "idle": {"read": {}, "write": {}}}


def test_a_placement_without_a_device_is_not_traced(tmp_path):
    assert device_numbers({"ram": Path("/dev/shm")}) == {}
    with IoSizeTracer({}) as tracer:
        pass
    assert tracer.pid is None and tracer.result.sizes == {}


def dd(*args: str) -> None:
    subprocess.run(["dd", *args], check=True, capture_output=True)


@pytest.fixture
def two_devices(image_dir):
    with DevicePool() as pool:
        yield (pool.device("fast", device_spec("fast", {"loop": "160MB", "image_dir": str(image_dir)})),
               pool.device("slow", device_spec("slow", {"loop": "64MB", "image_dir": str(image_dir), "sector": 4096})))


@pytest.mark.device
@needs_root
def test_a_direct_write_and_read_land_in_their_buckets_and_only_on_their_device(two_devices):
    # Blocks of at most 64 pages: a loop device takes 128 segments per request, so a 1 MiB direct
    # IO from scattered pages is really issued as two 512 KiB requests (the histogram shows that too).
    fast, slow = two_devices
    with IoSizeTracer(device_numbers({"fast": fast.mount_point, "slow": slow.mount_point})) as tracer:
        assert tracer.pid is not None and not gone(tracer.pid)
        dd("if=/dev/zero", f"of={fast.mount_point}/data", "bs=256K", "count=400", "oflag=direct")
        dd(f"if={fast.mount_point}/data", "of=/dev/null", "bs=64K", "iflag=direct")
        dd("if=/dev/zero", f"of={slow.mount_point}/data", "bs=128K", "count=80", "oflag=direct")
    result = tracer.result
    assert result.source == TRACED and result.devices == {"fast": fast.dev, "slow": slow.dev}
    fast_sizes, slow_sizes = result.sizes["fast"], result.sizes["slow"]
    assert fast_sizes["write"].get(256 * KIB, 0) >= 400, fast_sizes  # in [256 KiB, 512 KiB)
    assert fast_sizes["read"].get(64 * KIB, 0) >= 1600, fast_sizes  # in [64 KiB, 128 KiB)
    assert max(fast_sizes["read"]) < 128 * KIB and max(fast_sizes["write"]) < 512 * KIB
    assert 128 * KIB not in fast_sizes["write"], "the 128 KiB writes went to the other device"
    assert slow_sizes["write"].get(128 * KIB, 0) >= 80 and 256 * KIB not in slow_sizes["write"], slow_sizes
    assert max(slow_sizes["read"], default=0) < 64 * KIB, "the 64 KiB reads were on the other device"


@pytest.mark.device
@needs_root
def test_without_bpftrace_the_sizes_are_diskstats_averages(two_devices):
    fast, _ = two_devices
    for program, why in ((None, "tracing turned off"),
                         ("/nonexistent/bpftrace", "/nonexistent/bpftrace not found (Debian's bpftrace)"),
                         ("false", "bpftrace exited at start (exit 1): no output")):
        with IoSizeTracer(device_numbers({"fast": fast.mount_point}), command=program) as tracer:
            dd("if=/dev/zero", f"of={fast.mount_point}/data", "bs=1M", "count=32", "oflag=direct")
        result = tracer.result
        assert tracer.pid is None and (result.source, result.note) == (AVERAGE, why)
        [(average, requests)] = result.sizes["fast"]["write"].items()
        assert requests >= 32 and average * requests >= 32 * MIB


@pytest.mark.device
@needs_root
def test_the_tracer_is_gone_after_stop_and_after_an_exception(two_devices):
    numbers = device_numbers({"fast": two_devices[0].mount_point})
    tracer = IoSizeTracer(numbers)
    tracer.start()
    pid = tracer.pid
    assert pid is not None and not gone(pid), tracer.note
    result = tracer.stop()
    assert result.source == TRACED, result.note
    bpftrace.wait_ended()  # it ends in the background once its maps are read
    assert gone(pid)

    with pytest.raises(ZeroDivisionError):
        with IoSizeTracer(numbers) as tracer:
            pid = tracer.pid
            assert pid is not None, tracer.note
            1 / 0
    assert gone(pid) and tracer.result is None


@pytest.mark.device
@needs_root
def test_the_tracer_dies_with_its_parent(two_devices):
    proc = child(f"""
        import time
        from storlab.probes.iosizes import IoSizeTracer
        tracer = IoSizeTracer({{"fast": "{two_devices[0].dev}"}})
        tracer.start()
        print(tracer.pid, flush=True)
        time.sleep(120)
    """)
    try:
        pid = int(read_line(proc))
        assert not gone(pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert wait_gone(pid), "bpftrace outlived storlab"
    finally:
        proc.kill()
        proc.wait()
