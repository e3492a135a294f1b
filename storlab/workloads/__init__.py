"""Workload kinds, one module each, listed here by hand: each is held to the contract of
kind.CONTRACT when storlab loads. Adding a kind is its module and its line below."""

from __future__ import annotations

from storlab.workloads.bulk_insert import BulkInsert
from storlab.workloads.custom import Custom
from storlab.workloads.kind import Figure, Measurement, Workload, registry
from storlab.workloads.pgbench import Pgbench
from storlab.workloads.random_insert import RandomInsert
from storlab.workloads.replay import Replay
from storlab.workloads.scan import Scan
from storlab.workloads.sequential_insert import SequentialInsert
from storlab.workloads.sysbench import Sysbench

KINDS: dict[str, Workload] = registry(BulkInsert, Custom, Pgbench, RandomInsert, Replay, Scan, SequentialInsert, Sysbench)


def kind(name: str) -> Workload:
    return KINDS[name]


__all__ = ["KINDS", "Figure", "Measurement", "Workload", "kind"]
