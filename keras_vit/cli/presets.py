"""`keras-vit presets`: the names every command and `keras_vit.from_preset` take.

`keras-vit presets [PATTERN...] [--task T] [--family F] [--long] [--json]`
prints one line per checkpoint of the catalogue
(`keras_vit.presets.catalogue`, `keras_vit.list_presets`): its name, task,
family, parameter count, image size and licence; `--long` adds the handle
the name stands for and the model card; `--json` prints every field as a
JSON list. Exit status 0 with at least one name, 1 with none, 2 on a bad
`--task` or `--family` (the message names the allowed values).
"""

import json
import sys

from keras_vit.presets import catalogue

COLUMNS = ("name", "task", "family", "parameters", "resolution", "licence")
LONG_COLUMNS = COLUMNS + ("handle", "card")


def parameters_text(count):
    """A parameter count as people read it.

    Example:

    >>> parameters_text(5717416), parameters_text(86567656), parameters_text(1136480768)
    ('5.7M', '86.6M', '1.14B')
    """
    if count >= 1e9:
        return f"{count / 1e9:.2f}B"
    return f"{count / 1e6:.1f}M"


def _cells(row, columns):
    text = {
        "parameters": parameters_text(row.parameters),
        "resolution": "any" if row.resolution is None else "x".join(map(str, row.resolution)),
        "licence": row.licence or "none declared",
    }
    return [text.get(column, str(getattr(row, column))) for column in columns]


def table(rows, columns=COLUMNS):
    """The rows as aligned text columns under a header.

    Example:

    >>> print(table([catalogue.get_preset("deit_tiny")]))
    NAME       TASK            FAMILY  PARAMETERS  RESOLUTION  LICENCE
    deit_tiny  classification  deit    5.7M        224x224     apache-2.0
    """
    lines = [[c.upper() for c in columns]] + [_cells(row, columns) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def presets_command(args):
    """Prints the catalogue's names that match the arguments; returns the exit status."""
    try:
        names = catalogue.list_presets(args.patterns or None, task=args.task, family=args.family)
    except ValueError as error:
        print(f"keras-vit presets: error: {error}", file=sys.stderr)
        return 2
    rows = [catalogue.PRESETS[name] for name in names]
    if args.json:
        print(json.dumps([row._asdict() for row in rows], indent=1))
    elif rows:
        print(table(rows, LONG_COLUMNS if args.long else COLUMNS))
    if not rows:
        print("keras-vit presets: no preset name matches", file=sys.stderr)
        return 1
    if not args.json:
        print(f"{len(rows)} of {len(catalogue.PRESETS)} presets")
    return 0
