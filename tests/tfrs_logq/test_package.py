"""The Keras-2 guard of `import tfrs_logq`, checked in fresh interpreters."""

import os
import subprocess
import sys

import tensorflow as tf


def _run(code: str, **env):
    environment = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    environment.update(env, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
        check=False,
    )


class KerasGuardTest(tf.test.TestCase):
    def test_import_sets_legacy_keras(self):
        result = _run(
            "import tfrs_logq, os, tensorflow as tf; "
            "print(os.environ['TF_USE_LEGACY_KERAS'], tf.keras.Model.__module__)"
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), ["1", "tf_keras.src.engine.training"])

    def test_tensorflow_imported_first_but_keras_untouched_is_fine(self):
        result = _run("import tensorflow as tf; import tfrs_logq; print(tf.keras.Model.__module__)")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("tf_keras", result.stdout)

    def test_keras_3_already_loaded_raises_import_error_naming_the_fix(self):
        result = _run("import tensorflow as tf; tf.keras.layers; import tfrs_logq")
        self.assertNotEqual(result.returncode, 0)
        self.assertRegex(
            result.stderr,
            r"ImportError: tfrs_logq needs Keras 2 \(tf-keras\), but "
            r"`tf.keras` is Keras 3 .*Fix: run with the environment variable "
            r"TF_USE_LEGACY_KERAS=1",
        )


if __name__ == "__main__":
    tf.test.main()
