#!/usr/bin/env bash
# Records tests/data/explain/ with the current storlab: a small quickstart-like experiment on a real
# PostgreSQL (2 x 2 cells, 2 runs each) and `storlab io` of its disk placement in the folder `storlab io`
# names by default beside it, so the report finds the device's capability by itself. The exact-output
# tests (tests/test_outputs.py) and the browser test read copies of it; re-record only on purpose, then
# update their expected text. Run from the repository root, as root, after `make venv`.
set -euo pipefail
lab=/var/tmp/storlab-testdata
out=tests/data/explain
rm -rf "$lab" "$out"
mkdir -p "$lab/disk" "$out"
chmod 755 "$lab" "$lab/disk"
cat > "$lab/explain.toml" <<TOML
name = "explain"
engine = "postgres"
repetitions = 2

[placements]
disk = "$lab/disk"
ram = "tmpfs"

[layout]
data_files = [1, 4]
data_on = "disk"
log_on = ["disk", "ram"]

[workload]
kind = "random-insert"
connections = 8
rows_per_connection = 30_000
batch = 1000

[engine_settings]
shared_buffers = "128MB"
TOML
.venv/bin/storlab run "$lab/explain.toml" --out "$out/quickstart"
.venv/bin/storlab io "$lab/disk" --size 16M --duration 1s --out "$out/io-var-tmp-storlab-testdata-disk"
rm -rf "$lab"
