"""Probes: what is recorded beside the workload while it runs (waits, who waits on what, waits over time, device IO, IO sizes, per-file IO), each with one lifecycle."""
