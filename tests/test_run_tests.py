"""tools/run_tests.py: the summary it reads and the environment each backend's run gets."""

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


def test_jax_compiles_without_llvm_optimisations_unless_asked():
    from tools.run_tests import XLA_TEST_FLAG, backend_env

    base = {"PATH": "/bin", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    env = backend_env("jax", environ=base)
    assert env["KERAS_BACKEND"] == "jax"
    assert env["XLA_FLAGS"] == f"--xla_force_host_platform_device_count=2 {XLA_TEST_FLAG}"
    assert backend_env("jax", optimize_xla=True, environ=base)["XLA_FLAGS"] == base["XLA_FLAGS"]
    assert backend_env("jax", environ={})["XLA_FLAGS"] == XLA_TEST_FLAG
    for backend in ("tensorflow", "torch"):
        assert backend_env(backend, environ=base) == dict(base, KERAS_BACKEND=backend)
    # A level the caller chose is kept.
    chosen = {"XLA_FLAGS": "--xla_backend_optimization_level=2"}
    assert backend_env("jax", environ=chosen)["XLA_FLAGS"] == chosen["XLA_FLAGS"]
