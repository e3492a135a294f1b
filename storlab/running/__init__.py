"""Running: one way to run a cell (for `storlab run` and the fleet worker), what is checked before it starts, stalls, the fleet's queue, and cleaning up after a crash."""
