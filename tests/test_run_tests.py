"""tools/run_tests.py reads pytest's summary even when log lines follow it."""

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
