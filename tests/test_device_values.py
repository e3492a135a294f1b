"""Every value of a device key means what it says (issue 44): a bucket whose cap would reach the kernel
as 0 (no cap at all), inf and nan, -0.0 beside 0, a latency under the delay layer's own round trip,
images that do not fit together on their filesystem, and a PostgreSQL time as PostgreSQL reads it.
Each is refused when the file loads in one line naming its key and FILE:LINE, or by `storlab io` in
one line naming its flag, exit 2. Validation only: no server, no device, no fio."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from storlab.engines.postgres.settings import checkpoint_timeout_s
from storlab.experiment import file as experiment
from storlab.experiment import matrix
from storlab.lab import latency
from storlab.machine import system
from storlab.volume import added_latency, rates
from tests.commands import invoke
from tests.devicetools import needs_root
from tests.experiments import write_capped


def refused(path: Path) -> str:
    """What `storlab run --dry-run` says of a file it refuses: one line, exit 2."""
    result = invoke("run", str(path), "--dry-run", "--out", str(path.parent / "results"))
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def io_refused(tmp_path: Path, *flags: str) -> str:
    """What `storlab io` says of its flags: one line, exit 2, before it looks at its target (missing here)."""
    result = invoke("io", tmp_path / "missing", *flags)
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


# -- 1. a credit bucket whose cap would be 0 -----------------------------------------------------

LEAST_IOPS = ("is less than 1 IO a second, the least a cap can hold (the kernel counts whole IOs, and reads 0 as no "
              "cap at all)")
LEAST_MB_S = ("is less than a 4 KiB page a second (0.00390625), the least a cap can hold (the kernel counts whole "
              "bytes, and reads 0 as no cap at all)")


@pytest.mark.parametrize("table, flag, expected", [
    ("iops_bucket = { baseline = 0.4, burst = 1.4, size = 1 }", ("--iops-bucket", "0.4/1.4/1/0"),
     f"a bucket's baseline (0.4) {LEAST_IOPS}"),
    ("mb_s_bucket = { baseline = 1e-7, burst = 1e-6, size = 1 }", ("--mb-s-bucket", "1e-7/1e-6/1/0"),
     f"a bucket's baseline (1e-07) {LEAST_MB_S}"),
], ids=["iops", "mb_s"])
def test_a_bucket_below_one_io_or_one_page_a_second_is_refused_by_the_file_and_by_storlab_io(lab_root, tmp_path, table,
                                                                                           flag, expected):
    key = table.split(" ", 1)[0]
    path = write_capped(lab_root, f'vol = {{ loop = "1GB", {table} }}')
    assert refused(path) == f"storlab: caps.toml:6: placements.vol.{key}: {expected}\n"
    assert io_refused(tmp_path, *flag) == f"storlab: {flag[0]} {flag[1]!r}: {expected}\n"  # one check, the same words


def test_a_bucket_of_one_io_or_one_page_a_second_is_taken(lab_root):
    path = write_capped(lab_root, 'vol = { loop = "1GB", iops_bucket = { baseline = 1, burst = 2, size = 1 } }\n'
                                  f'wal = {{ loop = "1GB", mb_s_bucket = {{ baseline = {rates.MIN_MB_S}, burst = 1, size = 1 }} }}')
    exp = experiment.parse(path, path.read_text(), check_placements=False)
    assert exp.capped["vol"].caps().write_iops == 2 and exp.capped["wal"].caps().write_bps == 2**20


def test_a_bucket_of_size_0_says_its_size_must_be_above_0(lab_root, tmp_path):
    path = write_capped(lab_root, 'vol = { loop = "1GB", iops_bucket = { baseline = 300, burst = 3000, size = 0 } }')
    assert refused(path) == "storlab: caps.toml:6: placements.vol.iops_bucket: a bucket's size (0) must be above 0\n"
    assert io_refused(tmp_path, "--iops-bucket", "300/3000/0") == \
        "storlab: --iops-bucket '300/3000/0': a bucket's size (0) must be above 0\n"


# -- 2. inf, nan and -0.0 --------------------------------------------------------------------------


@pytest.mark.parametrize("table, expected", [
    ("flush_latency_ms = [0, -0.0]", "flush_latency_ms: 0.0 is listed twice; each value of a factor makes one cell"),
    ("iops_bucket = [{ baseline = 1, burst = 2, size = 3, start = 0 }, { baseline = 1, burst = 2, size = 3, start = -0.0 }]",
     'iops_bucket: {"baseline": 1.0, "burst": 2.0, "size": 3.0, "start": 0.0} is listed twice; each value of a factor '
     "makes one cell"),
], ids=["latency", "bucket"])
def test_minus_0_is_0_so_0_and_minus_0_are_one_value_given_twice(lab_root, table, expected):
    path = write_capped(lab_root, f'vol = {{ loop = "1GB", {table} }}')
    assert refused(path) == f"storlab: caps.toml:6: placements.vol.{expected}\n"


@pytest.mark.parametrize("table", [
    "iops_bucket = { baseline = 300, burst = 3000, size = inf }",
    "mb_s_bucket = { baseline = 1, burst = 10, size = 100, start = nan }",
    "iops_bucket = { baseline = 300, burst = inf, size = 9000 }",
    "read_latency_ms = inf",
    "write_latency_ms = { p50 = 1, p99 = inf }",
    "flush_latency_ms = [1, nan]",
    "mb_s = inf",
    "write_mb_s = nan",
])
def test_inf_and_nan_are_refused_in_every_numeric_device_key(lab_root, table):
    key = table.split(" ", 1)[0]
    path = write_capped(lab_root, f'vol = {{ loop = "1GB", {table} }}')
    assert refused(path).startswith(f"storlab: caps.toml:6: placements.vol.{key}: ")


@pytest.mark.parametrize("flag, value", [
    ("--iops-bucket", "300/3000/inf"), ("--mb-s-bucket", "1/10/100/nan"), ("--read-latency", "inf"),
    ("--write-latency", "1/inf"), ("--flush-latency", "nan"), ("--mb-s", "inf"), ("--read-mb-s", "nan"),
])
def test_storlab_io_refuses_inf_and_nan_in_its_flags(tmp_path, flag, value):
    assert io_refused(tmp_path, flag, value).startswith(f"storlab: {flag}")


# -- 3. every placement's image on one filesystem, together ---------------------------------------


@needs_root
def test_images_that_fit_one_by_one_but_not_together_are_refused_at_load_and_nothing_is_made(lab_root, images):
    each = f"{int(shutil.disk_usage(images).free * 0.6) // 2**20}MB"  # each fits alone, not both
    alone = write_capped(lab_root, f'vol = {{ loop = "{each}", image_dir = "{images}" }}')
    experiment.load(alone)  # the host checks pass for one
    path = write_capped(lab_root, f'vol = {{ loop = "{each}", image_dir = "{images}" }}\n'
                                  f'wal = {{ loop = "{each}", image_dir = "{images}/wal" }}', layout='log_on = "wal"')
    said = refused(path)
    assert said.startswith("storlab: caps.toml:6: placements.vol.loop: the images of placements.vol, placements.wal "
                           "need "), said
    assert f" GiB free on the filesystem holding {images}" in said
    assert list(images.iterdir()) == []


# -- 4. checkpoint_timeout as PostgreSQL reads it ------------------------------------------------

# What PostgreSQL 15 said (`postgres -C checkpoint_timeout`, checkpoint_timeout = 'VALUE'): its integer
# settings read a number as C does (0x hex, 0 octal, decimals and exponents), a unit of the setting's,
# a fraction rounded to the next smaller unit and then to whole seconds (half to even). 0 and below
# are read too, then refused by the server's own range (30 s to 1 d), with FILE:LINE.
POSTGRES_READS = {
    "0.5min": 30, "30": 30, "30.5": 30, "31.5": 32, "036": 30, "0x1e": 30, "0X1E": 30, "1e2": 100, "1E2": 100,
    ".5min": 30, " 0.5min": 30, "0.5 min": 30, "5 min ": 300, "+1min": 60, "30000ms": 30, "30000000us": 30,
    "0x1.8p5": 48, "0x1.8p5min": 2880, "40.": 40, "040.5": 40, "45.5": 46, "44.5": 44, "0.75min": 45, "1.5h": 5400,
    "1.0000001min": 60, "1.5e1 min": 900, "1d": 86400, "100 s": 100, "30 ms": 0, "-30": -30, "0.0083333h": 0,
    300: 300, 30.5: 30,
}
POSTGRES_REFUSES = ["0.5mins", "1min30s", "08", "1e", "1e1e", "nan", "inf", "5 minutes", "", "min", True]


def test_checkpoint_timeout_is_read_as_postgresql_reads_it():
    assert {v: checkpoint_timeout_s({"checkpoint_timeout": v}) for v in POSTGRES_READS} == POSTGRES_READS
    assert [v for v in POSTGRES_REFUSES if checkpoint_timeout_s({"checkpoint_timeout": v}) is not None] == []
    assert checkpoint_timeout_s({}) == 300  # the server's default
    assert checkpoint_timeout_s({"Checkpoint_Timeout": "1min"}) == 60  # its names ignore case, as the server's


def test_checkpoint_timeout_of_half_a_minute_is_30_s_and_one_postgresql_cannot_read_is_refused_at_its_line(lab_root):
    workload = "scale = 1\ncheckpoint_cycles = 3"
    path = write_capped(lab_root, 'vol = { loop = "1GB" }', workload=workload, settings='checkpoint_timeout = "0.5min"')
    exp = experiment.parse(path, path.read_text(), check_placements=False)
    assert matrix.cells(exp)[0].workload.duration_s == 90
    path = write_capped(lab_root, 'vol = { loop = "1GB" }', workload=workload,
                        settings='checkpoint_timeout = ["1min", "5 minutes"]')
    assert refused(path) == ('storlab: caps.toml:18: engine_settings.checkpoint_timeout: "5 minutes" is not a time '
                             'PostgreSQL reads (a number and a unit: us, ms, s, min, h or d, such as "30s" or "0.5min"; '
                             "a bare number counts seconds)\n")


# -- 5. one fixed floor for a declared latency ---------------------------------------------------

BELOW = ("is below 0.1 ms: the delay layer's own round trip is some 0.03 to 0.13 ms on a 2-core VM, and a declared "
         "time below 0.1 ms could not be told apart from it; declare 0 (nothing added) or at least 0.1 ms")


def test_a_latency_under_0_1_ms_is_refused_by_the_file_and_by_storlab_io_whatever_the_machine_is_doing(lab_root,
                                                                                                    tmp_path):
    path = write_capped(lab_root, 'vol = { loop = "1GB", read_latency_ms = [0, 0.05] }')
    assert refused(path) == f"storlab: caps.toml:6: placements.vol.read_latency_ms: 0.05 ms {BELOW}\n"
    path = write_capped(lab_root, 'vol = { loop = "1GB", write_latency_ms = { p50 = 0.05, p99 = 1 } }')
    assert refused(path) == f"storlab: caps.toml:6: placements.vol.write_latency_ms: p50 0.05 ms {BELOW}\n"
    assert io_refused(tmp_path, "--flush-latency", "0.05") == f"storlab: --flush-latency '0.05': 0.05 ms {BELOW}\n"
    assert io_refused(tmp_path, "--read-latency", "0.05/1") == f"storlab: --read-latency '0.05/1': p50 0.05 ms {BELOW}\n"
    assert added_latency.MIN_LATENCY_MS == 0.1


@needs_root
@pytest.mark.skipif(latency.unavailable() is not None, reason=f"no delay layer here: {latency.unavailable()}")
def test_0_and_0_1_ms_are_taken_without_measuring_the_layer_s_floor(lab_root, images, monkeypatch):
    def measured(*args):
        raise AssertionError("the load measured the delay layer's floor")

    monkeypatch.setattr(latency, "floor", measured)
    path = write_capped(lab_root, f'vol = {{ loop = "1GB", image_dir = "{images}", read_latency_ms = [0, 0.1], '
                                  'flush_latency_ms = { p50 = 0.1, p99 = 1 } }')
    assert experiment.load(path).factors == {"placements.vol.read_latency_ms": [0.0, 0.1]}


def test_storlab_check_says_the_measured_floor_as_a_fact_and_the_fixed_floor_as_the_rule(monkeypatch):
    monkeypatch.setattr(latency, "floor", lambda *args: latency.Floor(0.13, 20.0))
    monkeypatch.setattr(latency, "unavailable", lambda: None)
    (item,) = system.latency_items()
    assert "its floor: +0.130 ms a 4 KiB direct read at 0 ms declared" in item.value
    assert item.value.endswith("a declared latency under 0.1 ms is refused, whatever the floor measured here")
