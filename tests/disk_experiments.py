"""The experiment file most tests write: its data on one folder, the placement `disk`, and a workload of
the test's own. Plain text, laid out as storlab's examples are (a blank line between tables), so that
a refusal's line number is the same whichever test wrote the file; a value left as a {placeholder} is
for the test to fill with str.format."""

from __future__ import annotations


def on_disk(workload: str, *, name: str, engine: str = "postgres", head: str = "", repetitions: object = 1,
            disk: object = "{disk}", placements: str = "", layout: str = "", settings: str | None = None) -> str:
    """`workload`: the lines of its [workload] table; `head`: a line after the engine's (its version's,
    even when it is filled with nothing); `repetitions` None: the key left out; `placements` and
    `layout`: lines added to those tables; `settings`: the lines of an [engine_settings] table."""
    lines = [f'name = "{name}"', f'engine = "{engine}"', *([head] if head else []),
             *([f"repetitions = {repetitions}"] if repetitions is not None else []),
             "", "[placements]", f'disk = "{disk}"', *([placements] if placements else []),
             "", "[layout]", 'data_on = "disk"', *([layout] if layout else []),
             "", "[workload]", workload.rstrip("\n")]
    if settings is not None:
        lines += ["", "[engine_settings]", settings]
    return "\n".join(lines) + "\n"
