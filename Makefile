# The two commands of the README. Both install what they need first: Debian packages, then a
# virtual environment with the pinned Python dependencies.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEB_PACKAGES := postgresql-15 postgresql-15-pg-wait-sampling mariadb-server fio python3-venv bpftrace xfsprogs chromium sysbench pgreplay gcc libmariadb-dev
QUICKSTART_PLACEMENTS := /var/tmp/storlab/quickstart /dev/shm

.PHONY: demo test system-packages venv

demo: system-packages venv
	mkdir -p /var/tmp/storlab/quickstart
	-$(BIN)/storlab check $(QUICKSTART_PLACEMENTS)
	$(BIN)/storlab run examples/quickstart.toml
	$(BIN)/storlab report results/quickstart

# Three workers on two cores: most of a test's time is a server starting, a load running or a device
# being made, not the CPU (the suite used 18 CPU minutes in 11.5 minutes here with three, against 17
# minutes with two), and the tests already run beside each other as storlab runs on one host do (each
# has its own state dir and cleans only what it made; a test that needs the machine is marked alone).
# Work-stealing: a worker left with slow tests hands them to one that is done. The tests marked alone
# run first, one after another: among the others each waited for every running test to end and held the
# other workers idle (the whole suite 875 s in one go here, 137 s + 702 s in two).
test: system-packages venv
	$(BIN)/pytest -q -m alone --durations=5
	$(BIN)/pytest -q -n 3 --dist worksteal -m "not alone" --durations=25

system-packages:
	@scripts/install-system-packages $(DEB_PACKAGES)

venv: $(VENV)/.installed $(BIN)/storlab-delayfs $(BIN)/storlab-mariadb-replay

# The layer that holds a device placement's declared latency (storlab.lab.latency), built beside the
# venv's Python, where storlab looks for it. It speaks the kernel's FUSE protocol itself: no libfuse.
$(BIN)/storlab-delayfs: native/storlab-delayfs.c $(VENV)/.installed
	$(CC) -O2 -Wall -Wextra -o $@ $< -lm -lpthread

# storlab's replayer of MariaDB's statement logs (storlab.workloads.mariadb_replay), on MariaDB's C
# client library; each run execs it, as the client user, from a descriptor storlab opens (mariadb_replay.py).
$(BIN)/storlab-mariadb-replay: native/storlab-mariadb-replay.c $(VENV)/.installed
	$(CC) -O2 -Wall -Wextra $$(mariadb_config --cflags) -o $@ $< $$(mariadb_config --libs) -lm -lpthread

$(VENV)/.installed: requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@
