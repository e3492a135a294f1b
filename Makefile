# The two commands of the README. Both install what they need first: Debian packages, then a
# virtual environment with the pinned Python dependencies.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEB_PACKAGES := postgresql-15 postgresql-15-pg-wait-sampling mariadb-server fio python3-venv bpftrace xfsprogs chromium sysbench pgreplay libfuse3-dev fuse3 pkg-config gcc
QUICKSTART_PLACEMENTS := /var/tmp/storlab/quickstart /dev/shm

.PHONY: demo test system-packages venv

demo: system-packages venv
	mkdir -p /var/tmp/storlab/quickstart
	-$(BIN)/storlab check $(QUICKSTART_PLACEMENTS)
	$(BIN)/storlab run examples/quickstart.toml
	$(BIN)/storlab report results/quickstart

# Two workers: most of a test's time is a server starting, a load running or a device being made, not
# the CPU, and the tests already run beside another session's (each has its own state dir and cleans
# only what it made), as two storlab runs on one host do.
test: system-packages venv
	$(BIN)/pytest -q -n 2 --durations=25

system-packages:
	@scripts/install-system-packages $(DEB_PACKAGES)

venv: $(VENV)/.installed $(BIN)/storlab-delayfs

# The layer that holds a device placement's declared latency (storlab.lab.latency), built beside the
# venv's Python, where storlab looks for it.
$(BIN)/storlab-delayfs: native/storlab-delayfs.c $(VENV)/.installed
	$(CC) -O2 -Wall -Wextra -o $@ $< $$(pkg-config --cflags --libs fuse3) -lm

$(VENV)/.installed: requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@
