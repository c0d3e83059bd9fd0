"""tools/run_tests.py: the summary it reads and the environment each backend's run gets."""

import os

from tools.run_tests import summary_counts


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
