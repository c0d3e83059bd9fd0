"""How keras_vit models run: the backend execution policy every model inherits.

`ModelRuntime` is a mixin placed before `keras.Model` in the bases of every
keras_vit model class. It holds what depends on the backend and device
rather than on the architecture, so that model classes stay architectures:

- On a TensorFlow CPU, inference is compiled with XLA when the choice was
  left to Keras (`jit_compile="auto"`). Keras' "auto" turns XLA off there;
  for inference it pays (ViT-B/16, batch 8: 1.34x the images/s of the graph
  runtime, `tools/benchmark.py`), while training measured faster without it
  (2.43 against 3.05 images/s for S/16), so only the predict function is
  compiled.
"""

import keras


class ModelRuntime:
    """Backend execution policy shared by every keras_vit model class."""

    def compile(self, *args, jit_compile="auto", **kwargs):
        """`keras.Model.compile`; with `jit_compile="auto"`, inference on a
        tensorflow CPU is compiled with XLA (see the module docstring)."""
        self._jit_compile_auto = jit_compile == "auto"
        super().compile(*args, jit_compile=jit_compile, **kwargs)

    def _xla_inference(self):
        """Whether the predict function is XLA-compiled by this policy."""
        if keras.backend.backend() != "tensorflow":
            return False
        if not getattr(self, "_jit_compile_auto", True) or self.run_eagerly:
            return False
        import tensorflow as tf

        if self.jit_compile or tf.config.list_logical_devices("GPU"):
            return False  # Keras has decided already (XLA on accelerators).
        return self.distribute_strategy.num_replicas_in_sync == 1

    def make_predict_function(self, force=False):
        if not self._xla_inference():
            return super().make_predict_function(force)
        chosen = self.jit_compile
        self.jit_compile = True
        try:
            return super().make_predict_function(force)
        finally:
            self.jit_compile = chosen
