"""The speed code of keras_vit, fenced: one portable reference, fast paths per backend.

The layers compute through a few functions: `project` (every projection),
`dense`, `mlp` and `project_mlp` (an MLP's two projections), `attention`
(with an optional mask), `decomposed_attention` (ViTDet's relative
positions), `activation`, `call_sublayer`,
`take`, `resize_bilinear` and `conv_relu_conv` (the dense heads' gathers,
resizes and last convolutions), and
`pad` (Keras' `pad` without the operation object it makes per call).
Each is written once in `keras.ops` (`keras_vit.kernels.portable`, the
reference and the exporters' form); a backend module (`torch_backend`,
`jax_backend`, `tensorflow_backend`, with the XLA forms in `xla`, torch's
resize in `torch_resize`, its decomposed attention in
`torch_decomposed_attention`, its MLP on many tokens in `torch_mlp`, its
in-place MLP activations in `torch_activations` and its head convolutions
on large maps in `torch_row_blocks`)
registers the fast paths it overrides them with (`registry`), each with a hardware
rule (`hardware`, or a short measurement at first use: `measured`) that
says where it pays, and the tests hold every registered path to the
portable form. Contexts steer the choice
(`switches`): `export_mode()`, `xla_compiled()`, `disabled(*names)`,
`portable_only()`, `forced(*names)`. What each fast path gained, on which
machine, and how to measure it again: docs/performance.md.

Private APIs of other libraries (`keras.src`, `torch.ops.mkldnn`, torch's
hook registries) are used in this package only.

Example:

>>> import numpy as np
>>> x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
>>> kernel = np.random.default_rng(1).normal(size=(8, 4)).astype("float32")
>>> fast = keras.ops.convert_to_numpy(dense(x, kernel))
>>> with portable_only():
...     plain = keras.ops.convert_to_numpy(dense(x, kernel))
>>> bool(np.allclose(fast, plain, atol=1e-5))
True
"""

import keras

# The backend modules register their fast paths on import (their libraries
# are imported only when a fast path runs).
from keras_vit.kernels import (  # noqa: F401
    jax_backend,
    tensorflow_backend,
    torch_backend,
    torch_decomposed_attention,
    torch_mlp,
    torch_resize,
    torch_row_blocks,
)
from keras_vit.kernels.api import (
    activation,
    attention,
    attention_probs,
    call_sublayer,
    conv_relu_conv,
    decomposed_attention,
    dense,
    gelu,
    mlp,
    pack_for_inference,
    pad,
    project,
    project_mlp,
    resize_bilinear,
    runs_plain,
    take,
)
from keras_vit.kernels.switches import (
    compiled_by_xla,
    disabled,
    export_mode,
    exporting,
    forced,
    is_enabled,
    portable_only,
    xla_compiled,
)

__all__ = [
    "activation",
    "attention",
    "attention_probs",
    "call_sublayer",
    "compiled_by_xla",
    "conv_relu_conv",
    "decomposed_attention",
    "dense",
    "disabled",
    "export_mode",
    "exporting",
    "forced",
    "gelu",
    "is_enabled",
    "mlp",
    "pack_for_inference",
    "pad",
    "take",
    "portable_only",
    "project",
    "project_mlp",
    "resize_bilinear",
    "runs_plain",
    "xla_compiled",
]
