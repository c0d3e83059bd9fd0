"""The README is the front door: short, its commands the ones CI runs, its
quickstart running, its tables those of the guides and the current results,
its links resolving."""

import re

from conftest import ROOT, requires_shared, runs_once
from docs_blocks import first_table, python_blocks, run_blocks, workspace

pytestmark = runs_once("torch", "the README's text and its quickstart; the calls it makes are tested on "
                                "every backend")

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_fits_a_few_screens():
    assert len(README.splitlines()) <= 300


def test_readme_commands_are_the_ones_ci_runs():
    """.ci/run installs with the README's set-up command and runs its test
    command (each under a `# README: ...` comment); the README's first block
    lists them, labelled, with the main job between them."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = {ci[i].removeprefix("# README: ").strip(): ci[i + 1].strip()
                for i, line in enumerate(ci) if line.startswith("# README: ")}
    assert set(commands) == {"set-up command", "test command"}, commands
    block = re.search(r"```bash\n(.*?)```", README, flags=re.S).group(1).splitlines()
    labelled = {line.split("#", 1)[1].split(":")[0].strip(): line.split("#", 1)[0].strip() for line in block}
    assert labelled["set-up"] == commands["set-up command"]
    assert labelled["tests"] == commands["test command"]
    assert labelled["main job"] == "python examples/finetune.py"


def test_quickstart_is_in_the_first_screen():
    first_screen = "\n".join(README.splitlines()[:50])
    (block,) = [b for b in python_blocks(ROOT / "README.md") if "deit_tiny_patch16_224.npz" in b.code]
    assert block.code in first_screen and len(block.code.splitlines()) <= 12


def test_quickstart_copies_are_the_readme_s():
    """The site's home page and the checkpoints guide show the README's block
    (and leave running it to the test below)."""
    (block,) = [b for b in python_blocks(ROOT / "README.md") if "deit_tiny_patch16_224.npz" in b.code]
    for page in ("docs/index.md", "docs/guides/checkpoints.md"):
        copies = [b for b in python_blocks(ROOT / page) if b.run_by == "tests/test_readme.py::test_offline_quickstart_runs"]
        assert [b.code for b in copies] == [block.code], page


@requires_shared
def test_offline_quickstart_runs(tmp_path):
    (block,) = [b for b in python_blocks(ROOT / "README.md") if "deit_tiny_patch16_224.npz" in b.code]
    printed, _ = run_blocks([block], workspace(tmp_path), "README.md")
    rows = [line.split() for line in printed.strip().splitlines()]
    assert sorted(row[0] for row in rows) == ["n02123045", "n02123159", "n02124075"], printed
    # The block's comment names the output in the order it prints.
    comment = block.code.rsplit("#", 1)[1]
    assert [row[1] for row in rows] == [name.strip() for name in comment.split(",")], printed


def _slug(heading):
    """The anchor of a heading, as GitHub and MkDocs write it for ours."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_resolve():
    """Every relative link names a file of the repository (and a heading of
    it, with an anchor); the guides it links are every guide there is."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", README)
    relative = [(target, anchor) for target, anchor in links if not re.match(r"\w+:", target)]
    assert len(relative) >= 15, relative
    for target, anchor in relative:
        path = ROOT / target
        assert path.is_file(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
            assert anchor in {_slug(h) for h in headings}, (target, anchor)
    guides = {f"docs/guides/{p.name}" for p in (ROOT / "docs" / "guides").glob("*.md")}
    assert guides <= {target for target, _ in relative}


def test_families_table_is_the_guide_s():
    guide = (ROOT / "docs" / "guides" / "families.md").read_text(encoding="utf-8")
    assert first_table(README, after="## Families") == first_table(guide)
