"""The test set-up itself (`tests/conftest.py`): a session ends without a traceback."""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.integration
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_tensorflows_temporary_directory_ends_without_a_traceback(tmp_path, workers):
    # tf.test.TestCase.get_temp_dir makes TensorFlow's directory in the session's, which
    # TensorFlow removes at exit: the session's clean-up leaves it to TensorFlow, and neither
    # "Error removing ..." nor, where pytest has closed the stream, a "--- Logging error ---"
    # traceback follows the summary.
    module = tmp_path / "test_temp_dir.py"
    module.write_text(
        textwrap.dedent("""
            import tensorflow as tf

            class TempDirTest(tf.test.TestCase):
                def test_it_is_made(self):
                    self.assertTrue(self.get_temp_dir())
        """)
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-p",
            "tests.conftest",  # The module is outside tests/: its set-up as a plugin.
            *workers,
            str(module),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "1 passed" in output, output[-3000:]
    for failure in ("Traceback", "Logging error", "Error removing"):
        assert failure not in output, output[-3000:]
