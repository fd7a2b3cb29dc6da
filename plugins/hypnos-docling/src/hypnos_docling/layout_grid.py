"""Tables whose cells the PDF draws: ruling lines that cross one another form a grid, and the text inside it is read
cell by cell (a cell's lines are one cell however its words wrap; a column is a column however close its neighbour
sets its words).

A grid needs vertical rules parting two columns or more and horizontal rules above and below; where rules part every
row, a row is the band between two of them, else each line that opens its first column opens a row.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypnos_docling.layout_lines import Line
from hypnos_docling.layout_tables import join_lines
from hypnos_docling.pdf_rules import Rule

JOIN = 2.0  # rules this close (points) are one rule, one edge
TOUCH = 3.0  # a vertical rule meets a horizontal one this close to it


@dataclass
class Grid:
    """The x of the grid's column edges and the y of its row edges (top-left points), left to right, top down."""

    xs: list[float]
    ys: list[float]

    def inside(self, row: list[Line]) -> bool:
        """The row lies inside the grid."""
        middle = (min(x.top for x in row) + max(x.bottom for x in row)) / 2
        return self.ys[0] < middle < self.ys[-1] and all(self.xs[0] - 1 <= x.left and x.right <= self.xs[-1] + 1
                                                         for x in row)  # fmt: skip

    def holds(self, row: list[Line]) -> bool:
        """The row lies inside the grid, across two of its columns or more."""
        return self.inside(row) and len({self.column(x) for x in row}) >= 2

    def column(self, line: Line) -> int:
        """The column the run's middle falls in."""
        middle = (line.left + line.right) / 2
        return max(0, min(len(self.xs) - 2, sum(1 for x in self.xs[1:-1] if x < middle)))

    def band(self, row: list[Line]) -> int:
        """The row band the row's middle falls in."""
        middle = (min(x.top for x in row) + max(x.bottom for x in row)) / 2
        return sum(1 for y in self.ys[1:-1] if y < middle)


def _edges(values: list[float]) -> list[float]:
    edges: list[float] = []
    for value in sorted(values):
        if edges and value - edges[-1] <= JOIN:
            continue
        edges.append(value)
    return edges


def grids_of(rules: list[Rule]) -> list[Grid]:
    """The grids the page's rules draw: each set of horizontal rules and the vertical rules meeting them, where the
    vertical ones part two columns or more."""
    horizontal = [rule for rule in rules if rule.horizontal]
    vertical = [rule for rule in rules if not rule.horizontal]
    grids: list[Grid] = []
    used: set[int] = set()
    for index, rule in enumerate(horizontal):
        if index in used:
            continue
        group = [rule]  # the horizontal rules sharing this one's extent (a table's top, header and foot rules)
        for other_index, other in enumerate(horizontal):
            if other_index != index and other_index not in used and _spans_alike(rule, other):
                group.append(other)
                used.add(other_index)
        used.add(index)
        left, right = min(r.left for r in group), max(r.right for r in group)
        top, bottom = min(r.top for r in group), max(r.bottom for r in group)
        sides = [
            r for r in vertical
            if left - TOUCH <= (r.left + r.right) / 2 <= right + TOUCH and r.top <= bottom + TOUCH
            and r.bottom >= top - TOUCH and r.bottom - r.top >= 0.3 * (bottom - top)
        ]  # fmt: skip
        xs = _edges([(r.left + r.right) / 2 for r in sides])
        ys = _edges([(r.top + r.bottom) / 2 for r in group])
        if len(xs) >= 3 and len(ys) >= 2:
            grids.append(Grid(xs, ys))
    return grids


def _spans_alike(a: Rule, b: Rule) -> bool:
    overlap = min(a.right, b.right) - max(a.left, b.left)
    return overlap >= 0.8 * max(a.right - a.left, b.right - b.left)


def grid_cells(grid: Grid, rows: list[list[Line]]) -> list[list[str]]:
    """The rows' text cell by cell: a row a band where rules part every row, else a row a line opening the first
    column (the lines under it that leave the first column empty are its cells' next lines)."""
    columns = len(grid.xs) - 1
    banded = len(grid.ys) - 1 >= 3 or len(rows) <= len(grid.ys) - 1
    table: list[list[list[str]]] = []
    last_band = -1
    for row in rows:
        band = grid.band(row)
        cells = {grid.column(line) for line in row}
        opens = band != last_band if banded else (band != last_band or 0 in cells)
        if opens or not table:
            table.append([[] for _ in range(columns)])
        last_band = band
        for line in row:
            table[-1][grid.column(line)].append(line.text.strip())
    return [[join_lines(parts) for parts in cells] for cells in table]


def ruled_table(rows: list[list[Line]], start: int, grids: list[Grid]) -> tuple[list[list[str]], int] | None:
    """The table a grid draws around rows[start] and the rows after it (its cells, and the index after its last
    row), None when no grid holds the row or its text does not fill the grid as a table's (two rows or more, most
    of them with two cells or more: a frame with a line down its middle is no table)."""
    grid = next((grid for grid in grids if grid.holds(rows[start])), None)
    if grid is None:
        return None
    end = start + 1
    while end < len(rows) and grid.inside(rows[end]):
        end += 1
    cells = grid_cells(grid, rows[start:end])
    full = sum(1 for row in cells if sum(1 for cell in row if cell) >= 2)
    if len(cells) < 2 or 2 * full < len(cells):
        return None
    return cells, end
