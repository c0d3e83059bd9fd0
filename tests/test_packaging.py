"""Packaging: every package and data file is declared in setup.cfg."""

import configparser

import setuptools

from conftest import ROOT, runs_once

pytestmark = runs_once("torch", "setup.cfg and the files it declares")


def test_every_package_is_declared():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    declared = set(config["options"]["packages"].split())
    found = set(setuptools.find_packages(str(ROOT), include=["keras_vit", "keras_vit.*"]))
    assert found <= declared, f"undeclared packages: {sorted(found - declared)}"
    assert "keras_vit_tools" in declared
    assert (ROOT / "tools" / "__init__.py").exists()


def test_label_files_are_package_data():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    patterns = config["options.package_data"]["keras_vit.labels"].replace(",", " ").split()
    files = [p.relative_to(ROOT / "keras_vit" / "labels") for p in (ROOT / "keras_vit" / "labels").iterdir()]
    data = [f for f in files if f.suffix in (".txt", ".gz")]
    assert data and all(any(f.match(p) for p in patterns) for f in data)


def test_all_extra_installs_every_other_extra():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    extras = {k: set(v.split()) for k, v in config["options.extras_require"].items()}
    union = set().union(*(v for k, v in extras.items() if k != "all"))
    assert union <= extras["all"], f"missing from [all]: {sorted(union - extras['all'])}"


@runs_once("jax", "building a wheel imports no Keras backend")
def test_wheel_holds_every_module_and_data_file(tmp_path):
    """A regular (non-editable) install gets every module and label file."""
    import subprocess
    import sys
    import zipfile

    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True,
    )
    (wheel,) = tmp_path.glob("keras_vit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        str(p.relative_to(ROOT)) for p in (ROOT / "keras_vit").rglob("*")
        if p.suffix in (".py", ".txt", ".gz") and "__pycache__" not in p.parts
    }
    expected |= {f"keras_vit_tools/{p.name}" for p in (ROOT / "tools").glob("*.py")}
    assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"


def test_each_backend_extra_runs_the_quick_start():
    """A one-backend install (`pip install -e ".[jax]"`) has what the README's
    quick start and main job import, and the README says how to select it."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    extras = {k: set(v.split()) for k, v in config["options.extras_require"].items()}
    for backend in ("jax", "tensorflow", "torch"):
        assert {"scikit-image", "scikit-learn", "Pillow"} <= extras[backend], backend
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert '".[jax]"' in install and "KERAS_BACKEND=jax" in install
