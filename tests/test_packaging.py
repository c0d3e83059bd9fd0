"""Packaging: every package and data file is declared in setup.cfg."""

import configparser

import setuptools

from conftest import ROOT


def test_every_package_is_declared():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    declared = set(config["options"]["packages"].split())
    found = set(setuptools.find_packages(str(ROOT), include=["keras_vit", "keras_vit.*"]))
    found.discard("keras_vit.labels")  # data only, shipped as package_data
    assert found <= declared, f"undeclared packages: {sorted(found - declared)}"
    assert "keras_vit_tools" in declared
    assert (ROOT / "tools" / "__init__.py").exists()


def test_label_files_are_package_data():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    patterns = config["options.package_data"]["keras_vit"].replace(",", " ").split()
    files = [p.relative_to(ROOT / "keras_vit") for p in (ROOT / "keras_vit" / "labels").iterdir()]
    data = [f for f in files if f.suffix in (".txt", ".gz")]
    assert data and all(any(f.match(p) for p in patterns) for f in data)


def test_all_extra_installs_every_other_extra():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    extras = {k: set(v.split()) for k, v in config["options.extras_require"].items()}
    union = set().union(*(v for k, v in extras.items() if k != "all"))
    assert union <= extras["all"], f"missing from [all]: {sorted(union - extras['all'])}"
