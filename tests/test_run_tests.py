"""tools/run_tests.py: the summary it reads and the environment each backend's run gets."""

import os

import pytest

from tools.run_tests import summary_counts
from conftest import runs_once

pytestmark = runs_once("torch", "the test runner is plain Python")


def test_summary_counts_skip_trailing_log_lines():
    output = "\n".join(
        [
            "....s..F",
            "=========================== short test summary info ============================",
            "SKIPPED [1] tests/test_x.py:9: runs under the jax backend job",
            "FAILED tests/test_y.py::test_z - AssertionError",
            "= 1 failed, 490 passed, 1 skipped, 2 errors in 377.96s (0:06:17) =",
            "I0000 00:00:1795296049.721574 port.cc:153] oneDNN custom operations are on.",
        ]
    )
    assert summary_counts(output) == {"passed": 490, "failed": 1, "skipped": 1, "errors": 2}


def test_summary_counts_without_summary():
    assert summary_counts("crashed before collection") == {
        "passed": 0, "failed": 0, "skipped": 0, "errors": 0
    }


def test_xla_compiles_without_llvm_optimisations_unless_asked():
    from tools.run_tests import backend_env

    level, emitters = "--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false"
    split = "--xla_cpu_parallel_codegen_split_count=1"
    ours = {"jax": f"{level} {emitters} {split}", "tensorflow": level}
    base = {"PATH": "/bin", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    for backend in ("jax", "tensorflow"):
        env = backend_env(backend, environ=base)
        assert env["KERAS_BACKEND"] == backend
        assert env["XLA_FLAGS"] == f"--xla_force_host_platform_device_count=2 {ours[backend]}"
        assert backend_env(backend, optimize_xla=True, environ=base)["XLA_FLAGS"] == base["XLA_FLAGS"]
        assert backend_env(backend, environ={})["XLA_FLAGS"] == ours[backend]
        # An option the caller set is kept.
        chosen = {"XLA_FLAGS": "--xla_backend_optimization_level=2"}
        assert backend_env(backend, environ=chosen)["XLA_FLAGS"] == " ".join(
            ["--xla_backend_optimization_level=2", *ours[backend].split()[1:]])
    chosen = {"XLA_FLAGS": "--xla_cpu_use_fusion_emitters=true --xla_backend_optimization_level=3"}
    assert backend_env("jax", environ=chosen)["XLA_FLAGS"] == f"{chosen['XLA_FLAGS']} {split}"
    assert backend_env("torch", environ=base) == dict(base, KERAS_BACKEND="torch")


def test_each_worker_gets_its_share_of_the_cores_for_openmp():
    from tools.run_tests import backend_env

    for backend in ("jax", "tensorflow", "torch"):
        assert backend_env(backend, environ={}, threads=3)["OMP_NUM_THREADS"] == "3"
        assert "OMP_NUM_THREADS" not in backend_env(backend, environ={})
        # A count the caller chose is kept.
        chosen = backend_env(backend, environ={"OMP_NUM_THREADS": "8"}, threads=1)
        assert chosen["OMP_NUM_THREADS"] == "8"


def test_main_passes_the_thread_share_to_every_backend_run(monkeypatch):
    import subprocess

    from tools import run_tests

    seen = []

    def fake_run(cmd, env, **kwargs):
        seen.append((cmd, env))
        return subprocess.CompletedProcess(cmd, 0, stdout="1 passed in 0.1s\n")

    monkeypatch.setattr(run_tests.subprocess, "run", fake_run)
    monkeypatch.setattr(run_tests.os, "cpu_count", lambda: 4)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert run_tests.main(["--backends", "jax,torch", "--workers", "2"]) == 0
    assert [env["KERAS_BACKEND"] for _, env in seen] == ["jax", "torch"]
    if run_tests.importlib.util.find_spec("xdist") is not None:
        assert all(env["OMP_NUM_THREADS"] == "2" for _, env in seen)
        assert all("-n" in cmd for cmd, _ in seen)
    seen.clear()
    assert run_tests.main(["--backends", "torch", "--workers", "1"]) == 0
    assert "OMP_NUM_THREADS" not in seen[0][1] and "-n" not in seen[0][0]


def test_jax_runs_share_a_fresh_compilation_cache(monkeypatch):
    import subprocess

    from tools import run_tests

    seen = []

    def fake_run(cmd, env, **kwargs):
        folder = env.get("JAX_COMPILATION_CACHE_DIR")
        seen.append((env["KERAS_BACKEND"], folder, folder is not None and os.path.isdir(folder)))
        return subprocess.CompletedProcess(cmd, 0, stdout="1 passed in 0.1s\n")

    monkeypatch.setattr(run_tests.subprocess, "run", fake_run)
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    assert run_tests.main(["--backends", "jax,torch,jax", "--workers", "1"]) == 0
    (_, first, exists), (_, none, _), (_, second, _) = seen
    assert exists and none is None and first != second
    assert not os.path.exists(first), "the run's cache is removed after it"
    env = run_tests.backend_env("jax", environ={}, cache_dir="/c")
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    # No source locations in the jax job's programs, unless the caller asks for them.
    assert env["JAX_TRACEBACK_IN_LOCATIONS_LIMIT"] == "0"
    assert env["JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS"] == "false"
    assert run_tests.backend_env("jax", environ={"JAX_TRACEBACK_IN_LOCATIONS_LIMIT": "10"})[
        "JAX_TRACEBACK_IN_LOCATIONS_LIMIT"] == "10"
    assert "JAX_TRACEBACK_IN_LOCATIONS_LIMIT" not in run_tests.backend_env("torch", environ={})
    # A folder the caller chose is kept.
    assert run_tests.backend_env("jax", environ={"JAX_COMPILATION_CACHE_DIR": "/mine"}, cache_dir="/c")[
        "JAX_COMPILATION_CACHE_DIR"] == "/mine"


def test_quick_tier_runs_its_files_on_one_backend(monkeypatch):
    import subprocess

    from conftest import ROOT
    from tools import run_tests

    seen = []
    monkeypatch.setattr(run_tests.subprocess, "run", lambda cmd, env, **k: seen.append((cmd, env)) or
                        subprocess.CompletedProcess(cmd, 0, stdout="1 passed in 0.1s\n"))
    assert run_tests.main(["--quick", "--workers", "1", "-x"]) == 0
    ((cmd, env),) = seen
    assert env["KERAS_BACKEND"] == "torch" and cmd[-1] == "-x"
    assert [a for a in cmd if a.startswith("tests/")] == list(run_tests.QUICK)
    assert all((ROOT / f).is_file() for f in run_tests.QUICK)
    seen.clear()
    assert run_tests.main(["--quick", "--backends", "jax", "--workers", "1"]) == 0
    assert [env["KERAS_BACKEND"] for _, env in seen] == ["jax"]


def test_long_files_go_out_first_in_collection_order(monkeypatch):
    """The workers take whole files in collection order (pytest-xdist's own
    order turned off), the long files first; each file's tests keep theirs."""
    import pathlib
    import subprocess
    import types

    import conftest
    from conftest import ROOT
    from tools import run_tests

    assert all((ROOT / "tests" / name).is_file() for name in conftest.LONG_FILES)
    assert len(set(conftest.LONG_FILES)) == len(conftest.LONG_FILES)
    item = lambda name, test: types.SimpleNamespace(path=pathlib.Path("tests", name), name=test)
    first, second = conftest.LONG_FILES[:2]
    items = [item("test_a.py", "x"), item("test_b.py", "y"), item("test_b.py", "z"),
             item(second, "s"), item(first, "f2"), item(first, "f1")]
    ordered = [(i.path.name, i.name) for i in conftest._long_files_first(items)]
    assert ordered == [(first, "f2"), (first, "f1"), (second, "s"),
                       ("test_b.py", "y"), ("test_b.py", "z"), ("test_a.py", "x")]
    seen = []
    monkeypatch.setattr(run_tests.subprocess, "run", lambda cmd, env, **k: seen.append(cmd) or
                        subprocess.CompletedProcess(cmd, 0, stdout="1 passed in 0.1s\n"))
    assert run_tests.main(["--backends", "torch", "--workers", "2"]) == 0
    if run_tests.importlib.util.find_spec("xdist") is not None:
        assert "--no-loadscope-reorder" in seen[0] and "loadfile" in seen[0]


def test_each_job_lists_its_slowest_tests_unless_asked_otherwise(monkeypatch):
    import subprocess

    from tools import run_tests

    seen = []
    monkeypatch.setattr(run_tests.subprocess, "run", lambda cmd, env, **k: seen.append(cmd) or
                        subprocess.CompletedProcess(cmd, 0, stdout="1 passed in 0.1s\n"))
    monkeypatch.setattr(run_tests, "matmul_probe", lambda: 1.0)
    assert run_tests.main(["--backends", "torch", "--workers", "1"]) == 0
    assert f"--durations={run_tests.DURATIONS}" in seen[0] and run_tests.DURATIONS == 15
    seen.clear()
    assert run_tests.main(["--backends", "torch", "--workers", "1", "--durations=0"]) == 0
    assert [a for a in seen[0] if a.startswith("--durations")] == ["--durations=0"]


def test_a_backend_that_does_not_exist_is_named(capsys):
    import pytest

    from tools import run_tests

    with pytest.raises(SystemExit):
        run_tests.main(["--backends", "jax,pytorch"])
    assert "--backends takes jax, tensorflow, torch; got pytorch" in capsys.readouterr().err


def test_the_cpu_is_described_by_model_family_and_the_flags_that_matter():
    from tools.run_tests import cpu_description

    cpuinfo = "\n".join([
        "processor\t: 0", "cpu family\t: 23", "model\t\t: 1", "model name\t: AMD EPYC 7551",
        "flags\t\t: fpu sse2 avx2 fma", "", "processor\t: 1", "cpu family\t: 23", "model\t\t: 1",
        "model name\t: AMD EPYC 7551", "flags\t\t: fpu sse2 avx2 fma",
    ])
    assert cpu_description(cpuinfo) == "AMD EPYC 7551 (family 23 model 1, 2 cores; flags: avx2 fma)"
    amx = cpuinfo.replace("avx2 fma", "avx2 fma avx512f avx512_bf16 amx_tile amx_bf16")
    assert cpu_description(amx).endswith("flags: avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile)")


def test_coverage_runs_every_job_under_coverage_and_reports_lines_and_branches(monkeypatch, tmp_path):
    """`--coverage`: each job under `coverage run` with the same settings
    (branches, subprocesses, keras_vit only), the jobs' data combined, and
    line and branch coverage printed apart."""
    import subprocess

    from tools import run_tests

    jobs, combined = [], []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_tests, "matmul_probe", lambda: 1.0)
    monkeypatch.setattr(run_tests.importlib.util, "find_spec", lambda name: object())

    def fake_run(cmd, env=None, **kwargs):
        jobs.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="1 passed in 0.1s\n")

    def fake_combine(folder, rcfile, data_file):
        with open(rcfile, encoding="utf-8") as f:
            combined.append((f.read(), data_file))
        return run_tests.coverage_totals({"totals": {
            "covered_lines": 90, "num_statements": 100, "covered_branches": 30, "num_branches": 40,
            "percent_covered": 85.71}})

    monkeypatch.setattr(run_tests.subprocess, "run", fake_run)
    monkeypatch.setattr(run_tests, "combine_coverage", fake_combine)
    assert run_tests.main(["--coverage", "--backends", "jax,torch", "--workers", "1"]) == 0
    assert len(jobs) == 2 and all(cmd[1:4] == ["-m", "coverage", "run"] and "pytest" in cmd for cmd in jobs)
    ((settings, data_file),) = combined
    for line in ("branch = True", "parallel = True", "source_pkgs = keras_vit", "patch = subprocess"):
        assert line in settings
    assert data_file == str(tmp_path / ".coverage")
    lines, branches, text = run_tests.coverage_totals({"totals": {
        "covered_lines": 90, "num_statements": 100, "covered_branches": 30, "num_branches": 40,
        "percent_covered": 85.71}})
    assert (lines, branches) == (90.0, 75.0)
    assert "lines 90.00 % (90 of 100), branches 75.00 % (30 of 40)" in text


# ------------------------------------------------ where each test runs --
def _items(module_mark=None, marks_by_name=None, params=None):
    """Fake pytest items of one module: `(name, callspec id)` pairs, the
    module's mark and each test's own."""
    import pathlib
    import types

    module = types.SimpleNamespace(nodeid="tests/test_x.py", mark=module_mark)
    class Item:  # hashable, as pytest's items are
        pass

    items = []
    for name, case in params:
        own = (marks_by_name or {}).get(name)
        item = Item()
        item.path, item.originalname = pathlib.Path("tests/test_x.py"), name
        item.nodeid = f"tests/test_x.py::{name}" + (f"[{case}]" if case else "")
        if case:
            item.callspec = types.SimpleNamespace(id=case)
        chain = [(item, own)] if own is not None else []
        if module_mark is not None:
            chain.append((module, module_mark))
        item.iter_markers_with_node = lambda chain=chain: iter(chain)
        items.append(item)
    return items


def test_a_spread_module_runs_each_of_its_tests_in_one_job_and_every_backend_overrides(monkeypatch):
    import conftest

    module = conftest.spread("shared path")
    tests = [("test_a", None), ("test_b", None), ("test_c", "x"), ("test_c", "y"), ("test_d", None), ("test_e", None)]
    owners = {}
    for backend in conftest.BACKENDS:
        monkeypatch.setattr(conftest.keras.backend, "backend", lambda b=backend: b)
        items = _items(module.mark, {"test_d": conftest.every_backend("per backend").mark}, tests)
        elsewhere = conftest._elsewhere(items)
        for item in items:
            if item not in elsewhere:
                owners.setdefault(item.nodeid, []).append(backend)
        assert all(why[1].startswith("cases spread over the backends: shared path") for why in elsewhere.values())
    assert owners.pop("tests/test_x.py::test_d") == list(conftest.BACKENDS)
    assert sorted(len(b) for b in owners.values()) == [1, 1, 1, 1, 1]  # each once
    # Every job runs some; torch's, where a tiny model compiles nothing, most.
    assert sorted(b[0] for b in owners.values()) == ["jax", "tensorflow", "torch", "torch", "torch"]


def test_a_test_s_own_mark_wins_over_its_module_s(monkeypatch):
    import conftest

    monkeypatch.setattr(conftest.keras.backend, "backend", lambda: "jax")
    once = conftest.runs_once("torch", "files")
    items = _items(conftest.spread("x").mark, {"test_a": conftest.runs_once("jax", "mine").mark},
                   [("test_a", None), ("test_b", None)])
    assert items[0] not in conftest._elsewhere(items)
    items = _items(once.mark, None, [("test_a", None)])
    assert conftest._elsewhere(items) == {items[0]: ("torch", "files")}
    monkeypatch.setenv(conftest.ALL_CASES, "1")
    items = _items(conftest.spread("x").mark, None, [("test_a", None), ("test_b", None), ("test_c", None)])
    assert conftest._elsewhere(items) == {}


def test_per_backend_names_every_backend(monkeypatch):
    import pytest

    import conftest

    monkeypatch.setattr(conftest.keras.backend, "backend", lambda: "tensorflow")
    assert conftest.per_backend(jax="a", tensorflow="b", torch="c") == "b"
    with pytest.raises(ValueError, match="a choice for each of"):
        conftest.per_backend(jax="a", torch="c")
    with pytest.raises(ValueError, match="backend must be one of"):
        conftest.runs_once("pytorch", "why")


def test_placement_lists_the_tests_no_job_runs(monkeypatch, capsys):
    """`--placement` collects each job as it runs and with every case, and
    names what no job runs."""
    from tools import run_tests

    jobs = {("jax", False): {"t.py::a", "t.py::s[1]"}, ("torch", False): {"t.py::a"},
            ("jax", True): {"t.py::a", "t.py::s[1]"}, ("torch", True): {"t.py::a", "t.py::s[2]"}}
    monkeypatch.setattr(run_tests, "collected", lambda backend, all_cases, args: jobs[(backend, all_cases)])
    assert run_tests.main(["--placement", "--backends", "jax,torch"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "no job runs t.py::s[2]" and "3 tests over 2 jobs; 1 that no job runs" in out
    jobs[("torch", False)] = {"t.py::a", "t.py::s[2]"}
    assert run_tests.main(["--placement", "--backends", "jax,torch"]) == 0


def test_a_worker_writes_its_coverage_data_as_its_session_ends(monkeypatch):
    """An xdist worker may be ended with os._exit, before coverage.py's save at exit."""
    import sys
    import types

    import conftest

    calls = []
    current = types.SimpleNamespace(stop=lambda: calls.append("stop"), save=lambda: calls.append("save"))
    fake = types.SimpleNamespace(Coverage=types.SimpleNamespace(current=lambda: current))
    monkeypatch.setitem(sys.modules, "coverage", fake)
    session = types.SimpleNamespace(config=types.SimpleNamespace(workeroutput={}))
    conftest.pytest_sessionfinish(session)
    assert calls == ["stop", "save"] and "run_elsewhere" in session.config.workeroutput
    fake.Coverage.current = lambda: None  # not under coverage: nothing to write
    conftest.pytest_sessionfinish(session)
    assert calls == ["stop", "save"]


def test_the_jobs_of_a_run_share_one_folder_of_files_written_once(monkeypatch, tmp_path):
    import subprocess

    from tools import run_tests

    import conftest

    seen = []

    def fake_run(cmd, env, **kwargs):
        seen.append(env.get(run_tests.SHARED_DIR))
        return subprocess.CompletedProcess(cmd, 0, stdout="1 passed in 0.1s\n")

    monkeypatch.setattr(run_tests.subprocess, "run", fake_run)
    monkeypatch.delenv(run_tests.SHARED_DIR, raising=False)
    assert run_tests.main(["--backends", "jax,torch", "--workers", "1"]) == 0
    assert seen[0] is not None and seen[0] == seen[1]
    assert not os.path.exists(seen[0]), "the run's folder is removed after it"
    assert conftest.SHARED_DIR == run_tests.SHARED_DIR

    monkeypatch.setenv(conftest.SHARED_DIR, str(tmp_path))
    writes = []

    def write(folder):
        writes.append(folder)
        (folder / "weights.bin").write_bytes(b"1234")

    first = conftest.shared_files("preset", write)
    assert conftest.shared_files("preset", write) == first == tmp_path / "preset"
    assert len(writes) == 1 and (first / "weights.bin").read_bytes() == b"1234"
    # A write that fails leaves nothing behind, and the next one writes again.

    def broken(folder):
        (folder / "half").write_bytes(b"1")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        conftest.shared_files("other", broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["preset"]
    assert (conftest.shared_files("other", write) / "weights.bin").exists()
