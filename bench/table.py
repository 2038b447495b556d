"""The bench's tables: a header, rows of cells, columns as wide as their widest cell."""

from __future__ import annotations

from collections.abc import Sequence


def print_table(header: Sequence[object], rows: Sequence[Sequence[object]], title: str | None = None) -> None:
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    rule = "  ".join("-" * w for w in widths)
    if title:
        print(title)
    print(rule)
    for i, row in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if i == 0:
            print(rule)
    print(rule, flush=True)
