"""The report's tables as a test reads them: each table of the HTML page under the heading (h2) it
follows, its rows of cells as text, so a test compares a table's cells with the answer's figures."""

from __future__ import annotations

from html.parser import HTMLParser


class Tables(HTMLParser):
    """Each table of a page under the title (h2) it follows: its rows of cells, as text."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.title, self.text, self.row, self.inside = "", "", None, None

    def handle_starttag(self, tag, attrs):
        if tag in ("h2", "td", "th"):
            self.text = ""
        elif tag == "tr":
            self.row = []
        elif tag == "table":
            self.inside = self.tables.setdefault(self.title, [])
        elif tag == "svg":
            self.inside = None

    def handle_endtag(self, tag):
        if tag == "h2":
            self.title = self.text.strip()
        elif tag in ("td", "th") and self.row is not None:
            self.row.append(self.text.strip())
        elif tag == "tr" and self.row is not None and self.inside is not None:
            self.inside.append(self.row)
            self.row = None

    def handle_data(self, data):
        self.text += data


def tables(page: str) -> dict[str, list[list[str]]]:
    parser = Tables()
    parser.feed(page)
    return parser.tables
