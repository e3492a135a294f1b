"""What does the delay layer cost a database when it adds nothing? (goal: through the layer at 0 ms
declared / the plain device >= 0.95 for a commit-bound load, >= 0.98 for a read-only one)

One `storlab run` of pgbench (tpcb-like and select-only, a factor) with the data and the WAL on a loop
device, either plain or served through storlab's delay layer with every latency declared 0 ms (a
factor): each round runs every cell in a random order, so the pairs share the machine's state.
Prints each cell's txn/s per round, the ratio layer / plain per round and its median, and the layer's
CPU over each load (seconds, and as a share of one core). As root.

    .venv/bin/python benchmarks/latency_layer.py [--rounds 3] [--seconds 10] [--scale 10] [--clients 4]
"""

from __future__ import annotations

import statistics

import paired_cells

PLACEMENTS = """plain = {{ loop = "1GB", image_dir = "{images}" }}
layer = {{ loop = "1GB", image_dir = "{images}", read_latency_ms = 0, write_latency_ms = 0, flush_latency_ms = 0 }}"""


def main() -> None:
    args = paired_cells.arguments(__doc__).parse_args()
    results = paired_cells.run("latency-layer", PLACEMENTS.format(images=args.image_dir), ("plain", "layer"), args)
    cpu: dict[str, list[float]] = {}
    for f, _, _, conditions in paired_cells.transactions(results):
        layer_cpu = conditions.get("delay_layer_cpu_s", {}).get("layer")
        if layer_cpu is not None:
            cpu.setdefault(f["workload.script"], []).append(layer_cpu)

    def layer_cpu_line(script: str) -> None:
        seconds = cpu.get(script, [])
        if seconds:
            print(f"{'':12} the layer's CPU: {statistics.median(seconds):.2f} s a run (median), "
                  f"{100 * statistics.median(seconds) / args.seconds:.0f} % of one core over the load")

    print(f"pgbench scale {args.scale}, {args.clients} clients, {args.seconds} s a run; txn/s per round")
    paired_cells.compare(results, ("plain", "layer"), layer_cpu_line)


if __name__ == "__main__":
    main()
