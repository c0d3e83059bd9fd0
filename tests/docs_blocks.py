"""The code blocks and tables of the Markdown documentation, for the tests.

A ```python block runs in the tests unless the line just above it says
otherwise, in an HTML comment the site does not show:

    <!-- docs-test: skip (why it cannot run offline) -->
    <!-- docs-test: run by tests/test_docs.py::test_name -->

the second naming the test that runs it with checks of its own.
"""

import contextlib
import dataclasses
import io
import os
import re
import tempfile

from conftest import ROOT, SHARED

DOCS = ROOT / "docs"
# Pages written by hand: guides, benchmarks, the home page, the README.
# (docs/results holds benchmark output, docs/model-cards generated cards.)
HAND_WRITTEN = sorted(
    [ROOT / "README.md", DOCS / "index.md", DOCS / "benchmarks.md", DOCS / "checkpoints.md"]
    + list((DOCS / "guides").glob("*.md"))
)
_MARKER = re.compile(r"<!-- docs-test: (skip \((?P<reason>.+)\)|run by (?P<test>\S+)) -->")


@dataclasses.dataclass
class Block:
    code: str
    line: int
    skip: str = None      # the reason, for a block the tests do not run
    run_by: str = None    # "path::test" of the test that runs it


def python_blocks(path):
    """The ```python blocks of a Markdown file, in order, with their markers."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    while index < len(lines):
        if lines[index].strip() == "```python":
            end = lines.index("```", index + 1)
            marker = _MARKER.fullmatch(lines[index - 1].strip()) if index else None
            blocks.append(Block(
                "\n".join(lines[index + 1:end]) + "\n", index + 1,
                skip=marker and marker.group("reason"), run_by=marker and marker.group("test")))
            index = end
        index += 1
    return blocks


def markers(path):
    """Every docs-test comment on a line of its own, well-formed or not."""
    return re.findall(r"^\s*<!-- docs-test:.*$", path.read_text(encoding="utf-8"), flags=re.M)


def run_blocks(blocks, cwd, name, namespace=None):
    """Runs `blocks` in order in one namespace, in `cwd`, as a reader would
    paste them; returns (printed text, namespace).

    In a `workspace`, the folders the blocks make with `tempfile` (the
    guides write into `tempfile.mkdtemp()`, as a reader's paste would) go
    into the workspace's `temporary` folder beside `cwd`, so that they leave
    with the test's own files.
    """
    namespace = {"__name__": "__docs__"} if namespace is None else namespace
    printed = io.StringIO()
    previous, previous_tempdir = os.getcwd(), tempfile.tempdir
    temporary = os.path.join(os.path.dirname(os.path.abspath(cwd)), "temporary")
    if os.path.isdir(temporary):
        tempfile.tempdir = temporary
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(printed):
            for block in blocks:
                exec(compile(block.code, f"{name}:{block.line}", "exec"), namespace)
    finally:
        os.chdir(previous)
        tempfile.tempdir = previous_tempdir
    return printed.getvalue(), namespace


def workspace(tmp_path):
    """A folder to run blocks in, with `../shared` reaching the real weights
    and `../temporary` holding what the blocks put in temporary folders."""
    (tmp_path / "run").mkdir()
    (tmp_path / "temporary").mkdir()
    if SHARED.exists():
        (tmp_path / "shared").symlink_to(SHARED)
    return tmp_path / "run"


def table_rows(text, first_cell_pattern):
    """The cells of the Markdown table rows whose first cell matches."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(first_cell_pattern, cells[0]):
            rows.append(cells)
    return rows


def first_table(text, after=""):
    """The lines of the first Markdown table after the text `after`."""
    start = text.index(after) if after else 0
    lines = text[start:].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| "))
    table = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return table


def section(text, heading):
    """The text of a Markdown section, from its heading to the next of its level."""
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n")
    following = re.search(rf"\n{level} ", text[start + 1:])
    return text[start:start + 1 + following.start()] if following else text[start:]
