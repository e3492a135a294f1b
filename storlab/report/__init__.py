"""The report: one self-contained HTML page and its charts."""
