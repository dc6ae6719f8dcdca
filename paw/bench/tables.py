"""Markdown tables that leave out what holds no number: every table of the benchmarks' ``results.md``."""

from __future__ import annotations


def no_number(cell: str) -> bool:
    """``'†'``, ``'–'``, ``'n/a'`` and ``'refused'`` hold no number; ``'0.42 ± 0.05'`` does."""
    return not any(ch.isdigit() for ch in cell)


def table(title: str, columns: list[str], cells: dict, *, labels: tuple[str, ...] = ("target",),
          empty=no_number) -> list[str]:
    """A markdown table under ``### title`` without the rows and columns whose cells are all ``empty``.

    ``cells`` maps a row's label (a tuple when ``labels`` has several) to its cells. What was left
    out is named in one line; a table left with nothing is its title and one line.

    >>> table("kept", ["auto", "copy"], {"upgrade": ["0.91", "†"], "pruned": ["†", "n/a"]})[2:]
    ['| target | auto |', '|---|---|', '| upgrade | 0.91 |', '', 'Left out, no number (†, n/a): target pruned; column copy.', '']
    >>> table("kept", ["auto"], {"upgrade": ["†"]})
    ['### kept: no number (†).', '']
    """
    keep = [j for j in range(len(columns)) if not all(empty(row[j]) for row in cells.values())]
    rows = {name: row for name, row in cells.items() if not all(empty(row[j]) for j in keep)}
    marks = ", ".join(dict.fromkeys(c for row in cells.values() for c in row if empty(c) and 0 < len(c) <= 3))
    said = f"no number ({marks})" if marks else "no number"
    if not rows:
        return [f"### {title}: {said}.", ""]
    label = (lambda name: " | ".join(name)) if len(labels) > 1 else str
    out = [f"### {title}", "", "| " + " | ".join([*labels, *(columns[j] for j in keep)]) + " |",
           "|---" * (len(labels) + len(keep)) + "|"]
    out += [f"| {label(name)} | " + " | ".join(row[j] for j in keep) + " |" for name, row in rows.items()]
    gone = {labels[0]: [label(n) for n in cells if n not in rows],
            "column": [c for j, c in enumerate(columns) if j not in keep]}
    gone_text = "; ".join(f"{kind}{'s' * (len(names) > 1)} {', '.join(names)}" for kind, names in gone.items() if names)
    return out + (["", f"Left out, {said}: {gone_text}.", ""] if gone_text else [""])
