"""Tables from aligned columns: consecutive rows of two or more segments whose segments fall into the same columns;
a cell wrapped over lines is one cell; the first row is the header row. Code and dot-leader lines are no tables."""

from __future__ import annotations

import re

from hypnos_docling.layout_lines import Line, pitch

DOT_LEADER = re.compile(r"(?:\.\s?){4,}|(?:\u2026\s?){2,}|(?:_\s?){6,}")
LIST_MARKER = re.compile(
    r"^(?:[\u2022\u25cf\u25e6\u25aa\u25a0\u2023\u2043\u2219\u00b7*\-\u2013]|\(?\d{1,2}[.)]|\(?[a-z][.)])$"
)


NUMERIC = re.compile(r"^[\s$\u20ac\u00a3+\-\u2212]*\d[\d\s.,%]*$")
LINE = 1.3  # rows closer than this (in line heights) are a cell's next lines where blank lines part the rows
BLANK = 1.45  # rows this far apart or more stand a blank line apart
MAX_GAP = 6.0  # rows further apart (in line heights) are not one table, however well they fill its columns


def _fills_grid(row: list[Line], columns: list[tuple[float, float]]) -> bool:
    """Three or more runs, each in a column of its own and aligned with it (left, right or centre)."""
    if len(row) < 3:
        return False
    taken: set[int] = set()
    for line in row:
        aligned = [
            index
            for index, (left, right) in enumerate(columns)
            if index not in taken
            and min(abs(line.left - left), abs(line.right - right), abs((line.left + line.right - left - right) / 2))
            < 4
        ]
        if not aligned:
            return False
        taken.add(aligned[0])
    return True


def _left_aligned(row: list[Line], columns: list[tuple[float, float]]) -> bool:
    """A run in every column, each starting where its column starts (a full row of cells, whatever their face)."""
    starts = [index for line in row for index, (left, _) in enumerate(columns) if abs(line.left - left) < 3]
    return len(columns) >= 2 and len(starts) == len(row) == len(columns) == len(set(starts))


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return min(a[1], b[1]) - max(a[0], b[0])


def _column_of(segment: Line, columns: list[tuple[float, float]]) -> int | None:
    best, best_overlap = None, 0.0
    for index, span in enumerate(columns):
        overlap = _overlap((segment.left, segment.right), span)
        if overlap > best_overlap or (best is None and overlap > -4):
            best, best_overlap = index, max(overlap, best_overlap)
    return best


def is_table_row(row: list[Line], mono: set[str]) -> bool:
    """Two or more segments, not monospace, not a dot-leader line."""
    if len(row) < 2 or all(line.font in mono for line in row) or LIST_MARKER.match(row[0].text.strip()):
        return False
    return not any(DOT_LEADER.search(line.text) for line in row)


def table_run(rows: list[list[Line]], start: int, mono: set[str]) -> tuple[list[list[str]], int] | None:
    """The table starting at rows[start] (its cells, row by row) and the index after it; None if none starts there."""
    if not is_table_row(rows[start], mono):
        return None
    columns = [(line.left, line.right) for line in rows[start]]
    grid: list[list[list[str]]] = [[[line.text] for line in rows[start]]]
    gaps = [0.0]  # the gap (in line heights) above each of the grid's rows
    end = start + 1
    previous = rows[start]
    while end < len(rows):
        row = rows[end]
        height = max(line.height for line in row)
        gap = pitch(previous, row) / height
        if gap > MAX_GAP or (gap > 3.2 and not _fills_grid(row, columns)):  # a ruled table's padded rows go on
            break
        if any(DOT_LEADER.search(x.text) for x in row):
            break
        if any(line.font in mono for line in row) and not _left_aligned(row, columns):  # code cells on the grid
            break
        found = [_column_of(line, columns) for line in row]
        placed = [index for index in found if index is not None]
        if len(placed) != len(found) or len(set(placed)) != len(placed):
            break
        wrapped = placed[0] != 0 and gap < 1.5 and row[0].left >= columns[placed[0]][0] - 4  # a cell's next line
        if len(row) >= 2 or wrapped:
            # a row of cells under an empty first cell: the lines of the cells above wrapped, or a row of its own when
            # it carries a figure (booktabs' `each | 0.01` under `Gnat | per gram | 13.65`)
            new_row = len(row) >= 2 and (0 in placed or gap >= 1.5 or any(NUMERIC.match(x.text) for x in row))
            if new_row:
                grid.append([[] for _ in columns])
                gaps.append(gap)
            for line, index in zip(row, placed, strict=True):
                grid[-1][index].append(line.text)
                columns[index] = (min(columns[index][0], line.left), max(columns[index][1], line.right))
            previous = row
            end += 1
            continue
        break
    if len(grid) < 2 and end < len(rows):  # one row: a table only at the foot of the page (its body follows)
        return None
    return [[join_lines(parts) for parts in cells] for cells in _regrouped(grid, gaps)], end


def _regrouped(grid: list[list[list[str]]], gaps: list[float]) -> list[list[list[str]]]:
    """A table whose rows stand a blank line apart while the lines of each row's cells follow one another (groff's
    tbl with multi-line text blocks): the lines between two blanks are one row. Only where every gap is either a
    line's or a blank's, the header stands a blank apart and the body holds both."""
    body = gaps[2:]
    if len(grid) < 4 or gaps[1] < BLANK or any(LINE <= gap < BLANK for gap in gaps[1:]):
        return grid
    if not any(gap >= BLANK for gap in body) or not any(gap < LINE for gap in body):
        return grid
    rows = grid[:2]
    for cells, gap in zip(grid[2:], body, strict=True):
        if gap >= BLANK:
            rows.append(cells)
        else:
            for parts, more in zip(rows[-1], cells, strict=True):
                parts.extend(more)
    return rows


def join_lines(parts: list[str]) -> str:
    """A cell's lines as one text, a word hyphenated at a line's end joined again (`tropi-` `caux.`)."""
    text = ""
    for part in parts:
        part = part.strip()
        if text.endswith("-") and part[:1].islower():
            text = text[:-1] + part
        else:
            text = f"{text} {part}" if text else part
    return text
