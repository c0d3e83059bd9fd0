"""How keras_vit models run on a backend, apart from their architecture.

The model classes of `keras_vit.models` describe graphs; what depends on
the backend or on the data lives here, one concern per module, each reached
from `keras_vit.models.base.ModelBase` by one call:

- `inputs`: `input_spec_of(x)`, the shape and dtype a `fit`/`predict`
  argument feeds (arrays, tensors, `tf.data`), for the input checks;
- `jax_state`: `keep_state(model)`, a context around each trainer call: on
  jax a failed or interrupted call leaves the variables of the last
  completed step, where Keras' trainer would leave none;
- `tf_xla`: inference compiled with XLA on a TensorFlow CPU where
  `jit_compile` was left to Keras;
- `tf_build`: on TensorFlow, the optimizer's and metrics' variables built
  before the first step is traced (else it is traced twice);
- `processes`: `fit` refused under a torch process group of several
  processes;
- `fsdp`: FSDP's layouts (`FSDPLayoutMap`, `FSDP`) on jax;
- `sharded_load`: under a distribution on jax, a model built with no initial
  values and its checkpoint read into each variable's layout, each device's
  slice alone;
- `host`: `host_call(function, inputs, shape)`, NumPy on the host inside a
  compiled step (jax's `pure_callback`, TensorFlow's `numpy_function`,
  torch eagerly), for a loss's Hungarian matching.

Saving (atomic, gathered over processes) lives in `keras_vit.saving`.
"""
