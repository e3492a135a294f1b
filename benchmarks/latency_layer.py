"""What does the delay layer cost a database when it adds nothing? (goal: through the layer at 0 ms
declared / the plain device >= 0.9 for a commit-bound and a read-only load)

One `storlab run` of pgbench (tpcb-like and select-only, a factor) with the data and the WAL on a loop
device, either plain or served through storlab's delay layer with every latency declared 0 ms (a
factor): each round runs every cell in a random order, so the pairs share the machine's state.
Prints each cell's txn/s per round, the ratio layer / plain per round and its median, and the layer's
CPU over each load (seconds, and as a share of one core). As root.

    .venv/bin/python benchmarks/latency_layer.py [--rounds 3] [--seconds 10] [--scale 10] [--clients 4]
"""

from __future__ import annotations

import argparse
import statistics

import paired_cells

EXPERIMENT = """
name = "latency-layer"
engine = "postgres"
repetitions = {rounds}
# The data and the WAL on one placement: both plain, or both through the layer.
exclude = [{{ data_on = "plain", log_on = "layer" }}, {{ data_on = "layer", log_on = "plain" }}]

[placements]
plain = {{ loop = "1GB", image_dir = "{images}" }}
layer = {{ loop = "1GB", image_dir = "{images}", read_latency_ms = 0, write_latency_ms = 0, flush_latency_ms = 0 }}

[layout]
data_on = ["plain", "layer"]
log_on = ["plain", "layer"]

[workload]
kind = "pgbench"
script = ["tpcb-like", "select-only"]
scale = {scale}
clients = {clients}
duration_s = {seconds}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--image-dir", default="/var/tmp/storlab/img")
    args = parser.parse_args()

    results = paired_cells.run("latency-layer", EXPERIMENT.format(
        rounds=args.rounds, images=args.image_dir, scale=args.scale, clients=args.clients, seconds=args.seconds))
    tps: dict[tuple[str, str], dict[int, float]] = {}
    cpu: dict[str, list[float]] = {}
    for f, rnd, value, conditions in paired_cells.transactions(results):
        script, where = f["workload.script"], f["layout.data_on"]
        tps.setdefault((script, where), {})[rnd] = value
        layer_cpu = conditions.get("delay_layer_cpu_s", {}).get("layer")
        if layer_cpu is not None:
            cpu.setdefault(script, []).append(layer_cpu)
    print(f"pgbench scale {args.scale}, {args.clients} clients, {args.seconds} s a run; txn/s per round")
    for script in ("tpcb-like", "select-only"):
        plain, layer = tps[(script, "plain")], tps[(script, "layer")]
        ratios = [layer[r] / plain[r] for r in sorted(plain) if r in layer]
        print(f"{script:12} plain  " + "  ".join(f"{plain[r]:8,.0f}" for r in sorted(plain)))
        print(f"{'':12} layer  " + "  ".join(f"{layer[r]:8,.0f}" for r in sorted(layer)))
        print(f"{'':12} layer / plain: " + ", ".join(f"{x:.3f}" for x in ratios) +
              f"; median {statistics.median(ratios):.3f}")
        seconds = cpu.get(script, [])
        if seconds:
            print(f"{'':12} the layer's CPU: {statistics.median(seconds):.2f} s a run (median), "
                  f"{100 * statistics.median(seconds) / args.seconds:.0f} % of one core over the load")
    print(f"results: {results}")


if __name__ == "__main__":
    main()
