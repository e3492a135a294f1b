"""A placement's credit bucket: the file's keys (refused in one line when wrong), the keeper's arithmetic
against a group of plain counters and a fake clock (it runs dry when its credits are spent, holds the
baseline until it has a second of bursting again, and puts the start's caps back), and on a real
server and device: a 24 s pgbench run whose bucket empties after about 5 s falls off that cliff on its
timeline, the kernel lets through no more than the bucket allows, and show and the report say when."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field

import pytest

from storlab import timeline
from storlab.lab import caps, cgroups, credits, devices
from storlab.report import page as report_page
from storlab.lab.caps import Bucket, DeviceCap, IoCaps, IoCount
from tests.commands import invoke, storlab
from tests.devicetools import attached, needs_root
from tests.experiments import write_capped as write
from tests.page_tables import tables

BUCKET = Bucket("iops", baseline=20, burst=200, size=900, start=900)


@dataclass
class Group:
    """A control group of plain counters: what the keeper reads and the caps it holds."""

    limits: caps.GroupLimits
    charged: int = 0
    held: list[IoCaps] = field(default_factory=list)

    def charged_io(self) -> dict[str, IoCount]:
        return {"7:3": IoCount(0, self.charged, 0, self.charged * 8192)}

    def hold(self, cap: DeviceCap) -> None:
        self.held.append(cap.caps)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def keeper_with(bucket: Bucket) -> tuple[credits.CreditKeeper, Group, Clock]:
    start_caps = credits.at_rate(IoCaps(buckets=(bucket,)), bucket, bucket.start_cap)
    group = Group(caps.GroupLimits((DeviceCap(("vol",), "loop3", "7:3", start_caps),)))
    clock = Clock()
    return credits.CreditKeeper(group, clock=clock, wait=lambda _s: True), group, clock  # settled by hand


def spend(keeper, group, clock, rate: float, seconds: float) -> None:
    """IO at `rate` a second for `seconds`, settled every period."""
    for _ in range(round(seconds / credits.PERIOD_S)):
        clock.now += credits.PERIOD_S
        group.charged += round(rate * credits.PERIOD_S)
        keeper.settle()


def test_a_bucket_spent_at_its_burst_runs_dry_when_its_credits_are_gone_then_holds_the_baseline():
    keeper, group, clock = keeper_with(BUCKET)
    keeper.start(clock.now)
    assert group.held[-1].write_iops == 200 and group.held[-1].read_iops == 200
    spend(keeper, group, clock, 200, 5)  # 180 net a second: 900 credits last 5 s
    (use,) = [u for d in keeper.devices for u in d.use]
    assert use.dry_at_s == pytest.approx(5.0, abs=credits.PERIOD_S + 1e-9)
    assert group.held[-1].write_iops == 20
    # At the baseline it earns what it pays: it stays dry, the cap not changed every period.
    holds = len(group.held)
    spend(keeper, group, clock, 20, 5)
    assert len(group.held) == holds and group.held[-1].write_iops == 20
    # Idle, it bursts again once it holds a second of bursting (180 credits: 9 s at 20 a second).
    spend(keeper, group, clock, 0, 8.5)
    assert group.held[-1].write_iops == 20
    spend(keeper, group, clock, 0, 1)
    assert group.held[-1].write_iops == 200
    found = keeper.stop()
    assert found[0].dry_s == pytest.approx(5 + 9, abs=0.3) and found[0].spent == pytest.approx(200 * 5 + 20 * 5)
    assert found[0].run_s == pytest.approx(19.5)
    # The points: the cap in force at each change, and the credits left as a share of the bucket.
    caps_seen = [cap for _, cap, _ in found[0].points]
    assert caps_seen[0] == 200 and 20 in caps_seen and caps_seen[-1] == 200
    assert min(left for _, _, left in found[0].points) == 0 and max(left for _, _, left in found[0].points) == 100


def test_the_keeper_puts_the_start_caps_back_for_the_next_run_which_starts_full_again():
    keeper, group, clock = keeper_with(BUCKET)
    keeper.start(clock.now)
    spend(keeper, group, clock, 200, 6)
    assert group.held[-1].write_iops == 20
    keeper.stop()
    assert group.held[-1].write_iops == 200
    keeper.start(clock.now)
    spend(keeper, group, clock, 200, 3)
    (use,) = keeper.stop()
    assert use.dry_at_s is None and use.left == pytest.approx(900 - 3 * 180)


def test_a_bucket_that_starts_empty_starts_at_its_baseline_and_a_mib_bucket_pays_in_mib():
    empty = Bucket("mb_s", baseline=10, burst=100, size=50, start=0)
    assert empty.start_cap == 10 and empty.refill == 50
    keeper, group, clock = keeper_with(empty)
    keeper.start(clock.now)
    assert group.held[-1].write_mb_s == 10 and group.held[-1].write_iops is None
    spend(keeper, group, clock, 0, 4.9)  # earns 10 MiB a second: full (50) after 5 s
    assert group.held[-1].write_mb_s == 10
    spend(keeper, group, clock, 0, 0.2)
    assert group.held[-1].write_mb_s == 100
    spend(keeper, group, clock, 1280, 1)  # 128 IOs of 8 KiB a period: 10 MiB a second
    (use,) = keeper.stop()
    assert use.spent == pytest.approx(10.0) and use.dry_at_s is None


def test_a_bucket_is_said_in_words_and_its_unit_s_caps_by_it():
    held = credits.at_rate(IoCaps(write_mb_s=125, buckets=(BUCKET,)), BUCKET, 200)
    assert held.text() == "write 125 MiB/s, 20 IOPS, bursts to 200 from a bucket of 900 IO (full at the start)"


BAD = [
    ('vol = { loop = "1GB", iops_bucket = { baseline = 300, burst = 3000, size = 9000 }, iops = 100 }',
     "caps.toml:6: placements.vol.iops_bucket: iops_bucket sets the iops caps of both directions as its credits allow, "
     "and iops caps them too; give one of them"),
    ('vol = { loop = "1GB", mb_s_bucket = { baseline = 300, burst = 30, size = 9000 } }',
     "caps.toml:6: placements.vol.mb_s_bucket: a bucket's baseline (300) must be above 0 and below its burst (30)"),
    ('vol = { loop = "1GB", iops_bucket = { baseline = 300, burst = 3000, size = 10, start = 20 } }',
     "caps.toml:6: placements.vol.iops_bucket: a bucket's size (10) must be above 0 and hold its start (20)"),
    ('vol = { loop = "1GB", iops_bucket = { baseline = 300, burst = 3000 } }',
     "caps.toml:6: placements.vol.iops_bucket: expected { baseline = …, burst = …, size = …, start = … } (start "
     'optional: full) or a list of them, got {"baseline": 300, "burst": 3000}'),
    ('vol = { path = "tmpfs", iops_bucket = { baseline = 3, burst = 30, size = 90 } }',
     "caps.toml:6: placements.vol.iops_bucket: tmpfs is memory: it has no device to cap"),
]


@pytest.mark.parametrize("placements, expected", BAD, ids=range(len(BAD)))
def test_a_bad_bucket_is_one_line(lab_root, placements, expected):
    path = write(lab_root, placements)
    result = invoke("run", str(path), "--dry-run", "--out", str(lab_root / "results"))
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == "storlab: " + expected


def test_buckets_are_factors_of_the_matrix(lab_root):
    path = write(lab_root, 'vol = { loop = "1GB", iops_bucket = [{ baseline = 30, burst = 300, size = 900 }, '
                           '{ baseline = 30, burst = 300, size = 9000, start = 0 }] }')
    result = invoke("run", str(path), "--dry-run", "--out", str(lab_root / "results"))
    assert result.exit_code == 0, result.output
    assert "2 cells" in result.output and "vol.iops_bucket" in result.output


def _mean(points: list[tuple[float, float]], start: float, end: float) -> float:
    inside = [v for t, v in points if start <= t < end]
    return sum(inside) / len(inside)


@pytest.mark.engine
@pytest.mark.skipif(cgroups.limits_unavailable(True, False) is not None, reason="IO caps cannot be set here")
def test_a_bucket_that_empties_after_5_s_is_a_cliff_on_the_timeline_and_show_says_when(lab_root, images, tmp_path):
    # pgbench's commits at 300 IOPS spend 270 credits a second more than the bucket earns: 1,350 last 5 s.
    path = write(lab_root, f'vol = {{ loop = "256MB", image_dir = "{images}", '
                           'iops_bucket = { baseline = 30, burst = 300, size = 1350 } }',
                 workload="scale = 1\nclients = 4\nduration_s = 24", repetitions=1)
    done = storlab("run", path, "--out", tmp_path / "r", "--no-trace")
    assert done.returncode == 0, done.stderr
    answer = json.loads(storlab("show", tmp_path / "r", "--json").stdout)
    (row,) = answer["limits"]["buckets"]
    assert (row["unit"], row["baseline"], row["burst"], row["size"], row["start"]) == ("iops", 30, 300, 1350, 1350)
    (dry,) = row["dry"]
    assert dry["round"] == 1 and 3 <= dry["at_s"] <= 9
    assert 0.5 < row["dry_share"] < 0.9
    with sqlite3.connect(tmp_path / "r" / "storlab.sqlite") as db:
        series = db.execute("SELECT t_s, metric, value FROM timeline").fetchall()
        (charged, run_s), = db.execute("SELECT charged_read_ios + charged_write_ios, run_s FROM io_caps").fetchall()
    tps = [(t, v) for t, metric, v in series if metric == timeline.TRANSACTIONS_PER_S.name]
    held = [(t, v) for t, metric, v in series if metric == timeline.BUCKET_CAP["iops"].of("vol")]
    left = [v for _, metric, v in series if metric == timeline.CREDITS_LEFT["iops"].of("vol")]
    at = dry["at_s"]
    # The cliff: the throughput while it burst, against the throughput once the baseline held.
    assert _mean(tps, 1, at - 0.5) > 4 * _mean(tps, at + 2, 24)
    assert {v for t, v in held if t < at - 0.2} == {300} and {v for t, v in held if t > at + 0.2} == {30}
    assert left[0] == 100 and min(left) == 0
    # The kernel let through no more than the bucket allows (a settling period's overdraft aside).
    assert charged <= 1350 + 30 * run_s * 1.05 + 300 * 2 * credits.PERIOD_S
    detailed = storlab("show", tmp_path / "r", "--details")  # the limits' sentences: behind --details
    assert detailed.returncode == 0, detailed.stderr
    shown = " ".join(detailed.stdout.split())
    assert "credit buckets, per run" in shown and "ran dry in 1 of 1 run (round 1 at" in shown
    assert storlab("report", tmp_path / "r").returncode == 0
    page = (tmp_path / "r" / "report.html").read_text()
    assert "Credit buckets over time" in page and "credit bucket" in page
    # every file the report wrote is one it claims before writing any (so a refusal comes before the first)
    assert {p.name for p in (tmp_path / "r").glob("*.png")} <= set(report_page.FILES)
    # One answer, three renderers: what the caps and the bucket did, as the JSON says it, is what the
    # terminal says (show --details) and the report's table holds, with the time it ran dry to the tenth
    # of a second.
    assert any(f"round 1 at {dry['at_s']:.1f} s" in line for line in answer["limits"]["lines"])
    for line in answer["limits"]["lines"]:
        line = " ".join(line.split())
        assert line in shown, line
    found = tables(page)["IO caps, credit buckets and the server's memory"]
    (bucketed,) = [r for r in found if r[1] == f"vol on {row['device']}" and len(r) == 7]
    assert bucketed[0] == row["label"] and bucketed[2] == Bucket("iops", 30, 300, 1350, 1350).text()
    assert bucketed[3] == "1 of 1" and bucketed[4] == f"round 1 at {dry['at_s']:.1f} s"
    assert bucketed[5] == f"{100 * row['dry_share']:.0f} %" and bucketed[6] == f"{row['spent_per_run']:,.0f}"
    for cap in answer["limits"]["caps"]:  # the caps a bucket sets, if the answer names them: a row each
        assert any(r[0] == cap["label"] and r[1] == f"{', '.join(cap['placements'])} on {cap['device']}" and
                   r[3] == ("—" if cap["at_cap_share"] is None else f"{100 * cap['at_cap_share']:.0f} %")
                   for r in found if len(r) == 9), cap


@pytest.mark.device
@needs_root
@pytest.mark.skipif(cgroups.limits_unavailable(True, False) is not None, reason="IO caps cannot be set here")
def test_fio_through_a_bucket_runs_dry_when_its_credits_are_spent_and_no_more_passes(image_dir, tmp_path):
    """`storlab io --iops-bucket` runs each job from a full bucket on a real loop device: 1,000 credits
    spent at 400 IOPS while earning 40 last about 2.8 s, then the baseline holds."""
    with devices.DevicePool() as pool:
        device = pool.device("fast", devices.DeviceSpec(devices.DeviceFormat(256 * 2**20, 512, "ext4", "", image_dir), 128))
        out = tmp_path / "io"
        done = storlab("io", device.mount_point, "--preset", "latency", "--iops-bucket", "40/400/1000", "--size", "32M",
                       "--duration", "5s", "--out", out)
        assert done.returncode == 0, done.stderr
        with sqlite3.connect(out / "storlab.sqlite") as db:
            jobs = db.execute("SELECT job, iops, flags FROM io_jobs").fetchall()
    assert len(jobs) == 4
    for job, iops, flags in jobs:
        said = re.search(r"ran dry at ([0-9.]+) s.*; ([0-9,]+) IO charged of the ([0-9,]+) it allowed, held", flags)
        assert said, (job, flags)
        dry_at, charged, allowed = float(said[1]), int(said[2].replace(",", "")), int(said[3].replace(",", ""))
        assert 2.0 <= dry_at <= 3.8, (job, flags)
        assert charged <= allowed and iops * 5 <= allowed * 1.05, (job, iops, flags)
    assert "bucket on " in done.stdout
    assert not attached(image_dir)
