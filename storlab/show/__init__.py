"""Renderers of the answer: the terminal, `show --json`; they read storlab.answer.model and compute nothing."""
