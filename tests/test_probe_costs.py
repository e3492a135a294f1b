"""The costs of its probes a run paid, printed beside the answer: what each engine says a run had, the
one line, and every figure the same as the docs give with its command."""

from __future__ import annotations

from pathlib import Path

import pytest

from storlab.engines.mariadb import probe_costs as mariadb_costs
from storlab.engines.postgres import probe_costs as postgres_costs
from storlab.probes.costs import line

DOCS = (Path(__file__).parent.parent / "docs" / "explaining.md").read_text()
SAMPLED = "pg_wait_sampling"
COUNTED = "pg_wait_sampling + bpftrace counts"


@pytest.mark.parametrize("cost", [postgres_costs.COLLECTOR, postgres_costs.SAMPLERS, postgres_costs.ACTIVITY, postgres_costs.TRACES,
                                  postgres_costs.TRACES_IO,
                                  postgres_costs.READS, mariadb_costs.PERFORMANCE_SCHEMA, mariadb_costs.SAMPLERS,
                                  mariadb_costs.IO_SIZES], ids=lambda c: c.what)
def test_every_figure_printed_is_the_one_the_docs_give(cost):
    said = " ".join(DOCS.split())
    assert cost.figure in said, f"docs/explaining.md does not give {cost.what}'s figure {cost.figure!r}"
    assert cost.measured.split(",")[0] in said, f"docs/explaining.md does not name {cost.measured!r}"


@pytest.mark.parametrize("source, tracing, paid", [
    (COUNTED, "on", ("COLLECTOR", "SAMPLERS", "TRACES")),
    (COUNTED, "io", ("COLLECTOR", "SAMPLERS", "TRACES_IO")),
    (COUNTED, "reads", ("COLLECTOR", "SAMPLERS", "TRACES_IO", "READS")),
    (SAMPLED, "off", ("COLLECTOR", "SAMPLERS")),
    (f"{SAMPLED} (counts unavailable: no tracefs at /sys/kernel/tracing)", "on", ("COLLECTOR", "SAMPLERS")),
    ("pg_stat_activity sampled every 50 ms (no pg_wait_sampling)", "on", ("ACTIVITY",)),
])
def test_a_postgresql_run_pays_for_what_it_had(source, tracing, paid):
    assert postgres_costs.of_run(source, tracing) == tuple(getattr(postgres_costs, name) for name in paid)


def test_a_mariadb_run_pays_for_its_trace_only_where_it_traced():
    assert mariadb_costs.IO_SIZES in mariadb_costs.of_run("on")
    assert mariadb_costs.of_run("off") == (mariadb_costs.PERFORMANCE_SCHEMA, mariadb_costs.SAMPLERS)


def test_the_line_says_how_many_runs_paid_each_set_where_they_differ():
    traced, untraced = postgres_costs.of_run(COUNTED, "on"), postgres_costs.of_run(SAMPLED, "off")
    alike = line([traced, traced])
    assert alike.startswith("what the probes cost") and "(2 runs)" not in alike
    assert str(postgres_costs.TRACES) in alike
    mixed = line([traced, untraced, traced])
    assert f"{str(postgres_costs.TRACES)} (2 runs) | " in mixed and mixed.endswith(f"{postgres_costs.SAMPLERS} (1 run)")
    assert line([(), ()]) is None
