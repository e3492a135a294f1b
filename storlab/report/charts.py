"""What every chart of the report shares: matplotlib set up for files (no display, no math text in the
user's labels), one figure written as a PNG beside the store and returned as inline SVG."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Protocol

import matplotlib

matplotlib.use("Agg")
# Labels are the user's values: "$" must print as "$", never start math text.
matplotlib.rcParams["text.parse_math"] = False
# Ids in the SVG are derived from this salt, not from a random one: inline SVGs of one page never share
# an id by chance, and a report written twice from the same store is the same file.
matplotlib.rcParams["svg.hashsalt"] = "storlab"
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from storlab.results import outputs

# Wait types get their colour by rank in the experiment (largest first), the same in every chart.
PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]
OTHER_COLOUR = "#bab0ac"
OTHER = "other waits"


class RawSeries(Protocol):
    """Where the charts over time read the raw timelines of the runs the answer names: the store
    (storlab.results.store.Store), whose other tables the report never reads."""

    def timeline(self, run_id: int) -> list[tuple[float, str, float]]: ...


def _labels_overlap(fig, renderer) -> bool:
    """Turns upright the x tick labels of any axes where one would run into the next (many ticks, long
    values), so that no two labels overlap whatever the chart holds; True if it turned any."""
    turned = False
    for ax in fig.axes:
        boxes = sorted((t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_visible() and t.get_text()),
                       key=lambda box: box.x0)
        if any(a.x1 > b.x0 for a, b in zip(boxes, boxes[1:])):
            ax.tick_params(axis="x", labelrotation=90)
            turned = True
    return turned


def svg(fig, png_path: Path) -> str:
    """Writes the figure's PNG (through outputs, so a file storlab did not write is never replaced)
    and returns its SVG for the page. The figure is laid out once (again only if its labels had to
    turn), its tight box measured from that layout, and each file drawn once inside that box: savefig's
    own "tight" would lay it out and draw it a second time for each file."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    if _labels_overlap(fig, renderer):
        fig.draw_without_rendering()
    box = fig.get_tightbbox(renderer).padded(matplotlib.rcParams["savefig.pad_inches"])
    fig.set_layout_engine("none")  # laid out: the files keep this layout
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110, bbox_inches=box, metadata={"Software": None})
    outputs.write(png_path.parent, png_path.name, png.getvalue())
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches=box, metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def colours(wait_types: list[str]) -> dict[str, str]:
    """`wait_types` largest first: the first ones get the palette, the rest the colour of OTHER."""
    found = {name: PALETTE[i] for i, name in enumerate(wait_types[:len(PALETTE)])}
    found[OTHER] = OTHER_COLOUR
    return found
