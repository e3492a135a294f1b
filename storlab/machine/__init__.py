"""The machine: is it fit to benchmark (facts and checks), and what its devices can do (fio)."""
