"""What one run writes, as the capacity check estimates it: the workload's rows and the engine's floor,
with size settings read in each engine's own units."""

from storlab.lab.layout import CellLayout
from storlab.running import capacity
from storlab.workloads.random_insert import RandomInsertParams

MB = 1024**2
WORK = RandomInsertParams(kind="random-insert", connections=4, rows_per_connection=100_000)
LAYOUT = CellLayout(data_on="disk")


def test_postgres_wal_is_held_between_min_and_max_wal_size():
    plain = capacity.run_footprint("postgres", LAYOUT, WORK, {})
    assert plain.data == 16 * MB + 400_000 * 230
    assert plain.log == 400_000 * 300 + 16 * MB  # 114 MB of WAL, above the 80 MB min_wal_size
    capped = capacity.run_footprint("postgres", LAYOUT, WORK, {"max_wal_size": 64})  # a bare number is MB
    assert capped.log == 80 * MB + 16 * MB
    sized = capacity.run_footprint("postgres", CellLayout(data_on="disk", log_size_bytes=512 * MB), WORK, {})
    assert sized.log == 512 * MB + 16 * MB


def test_mariadb_redo_log_is_allocated_whole():
    assert capacity.run_footprint("mariadb", LAYOUT, WORK, {}).log == 96 * MB
    assert capacity.run_footprint("mariadb", LAYOUT, WORK, {"innodb_log_file_size": 8 * MB}).log == 8 * MB  # bytes
    assert capacity.run_footprint("mariadb", CellLayout(data_on="disk", log_size_bytes=256 * MB), WORK, {}).log == 256 * MB
    assert capacity.run_footprint("mariadb", LAYOUT, WORK, {}).data == 30 * MB + 400_000 * 460
