"""Times the pieces of one Transformer block on the current Keras backend.

Where `tools/benchmark.py` compares whole models with their peers, this
shows where a backend spends a block's time: forward and forward+backward of
the attention (each registered implementation of `keras_vit.kernels.attention`
on this backend, forced, and the portable form), the MLP, a LayerNorm and the
whole block, compiled as the backend's trainer compiles them (XLA on jax and
tensorflow, eager on torch). It is the profile behind the choice of attention
implementation per backend.

On torch it also times the block's four projection shapes
(`(batch * tokens, d_in) x (d_in, d_out)`) through torch's default GEMM
(`F.linear`, MKL) and through the oneDNN product of the "onednn" fast path,
side by side; `--dense` times only those. The two are interleaved call by
call, so a loaded machine disturbs both alike.
`--predict` instead times `model.predict` of the whole `--arch` model
(224 px, batch `--batch`): on torch the library's choice on this machine,
"onednn" disabled, "onednn" forced, and the `for_inference()` copy (kernels
kept in oneDNN's layout) with "onednn" forced, interleaved; on jax and
tensorflow once, for the ratio between backends.
`--head-tokens` times `predict_on_batch` and `train_on_batch` of the whole
model with its last block cut to the class token (the model's call) and on
every token (its graph), interleaved.
`--bf16` times `predict_on_batch` of the whole model in float32 and under
the `bfloat16` policy beside the model's projection products alone (every
`kernels.dense` call of one forward pass, compiled as `predict` compiles
them), interleaved: how much of the bfloat16 speed-up the products allow,
and how much the rest of the model keeps.
`--attention` times XLA's CPU attention (`kernels.attention` compiled by
jax, or by tensorflow as it compiles its predict function; forward and
forward+backward) at the `--tokens` counts with `--arch`'s heads: the scale
on the logits, the scale on the queries (`keras_vit.kernels.xla.fold_scale`),
and a group of heads at a time (`xla.ATTENTION_GROUP_BYTES`), interleaved:
the measurements behind `xla.GROUPED_ATTENTION_BYTES`.
`--versus-keras-hub` times, float32 and interleaved in one process,
keras_vit's whole `--arch` model, its projection products alone (as `--bf16`
compiles them), keras-hub's model of the same shape (as `tools/benchmark.py`
builds it) and a square matmul of side `--matmul-size`: the ratio of the two
models without the spread between processes, each rate as a share of the
square product's, and keras-hub's time over the products' (the most keras_vit
could gain with everything but those products taking no time).

Usage:
    KERAS_BACKEND=jax python tools/benchmark_kernels.py [--arch S/16] [--batch 16]
        [--reps 7] [--dense | --predict [--dtype bfloat16] | --head-tokens | --bf16
         | --versus-keras-hub [--matmul-size 4096] | --attention [--tokens 577,1370]]
        [--output PREFIX]

Prints a Markdown table (milliseconds, minimum over `--reps` calls after one
warm-up call) and, with `--output`, appends it to PREFIX.md.
"""

import argparse
import pathlib
import sys
import time

from keras_vit_tools.benchmark import ARCHS


def _timer(reps):
    def measure(fn):
        fn()
        best = float("inf")
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        return best * 1e3

    return measure


def _compiled(backend, fn):
    """`fn` compiled as the Keras trainer would, returning a NumPy-synced call."""
    import keras

    if backend == "jax":
        import jax

        jitted = jax.jit(fn)
        return lambda *a: jax.block_until_ready(jitted(*a))
    if backend == "tensorflow":
        import tensorflow as tf

        graph = tf.function(fn, jit_compile=False)
        return lambda *a: keras.tree.map_structure(lambda t: t.numpy(), graph(*a))
    return fn


def _forward_backward(backend, layer, x):
    """(forward call, forward+backward call) of `layer` on `x`."""
    if backend == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]

        def forward(weights, inputs):
            return layer.stateless_call(weights, [], inputs)[0]

        def loss(weights, inputs):
            return (forward(weights, inputs) ** 2).sum()

        fwd = _compiled(backend, forward)
        grad = _compiled(backend, jax.grad(loss, argnums=(0, 1)))
        return lambda: fwd(trainable, x), lambda: grad(trainable, x)
    if backend == "tensorflow":
        import tensorflow as tf

        xt = tf.convert_to_tensor(x)

        def grads(inputs):
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                loss = tf.reduce_sum(layer(inputs) ** 2)
            return tape.gradient(loss, [inputs] + layer.trainable_weights)

        fwd = _compiled(backend, lambda inputs: layer(inputs))
        grad = _compiled(backend, grads)
        return lambda: fwd(xt), lambda: grad(xt)
    import torch

    xt = torch.from_numpy(x).requires_grad_(True)

    def forward():
        with torch.no_grad():
            return layer(xt)

    def backward():
        loss = (layer(xt) ** 2).sum()
        loss.backward()

    return forward, backward


def _dense_rows(arch, batch, reps):
    """Projection shapes: ms for F.linear and the oneDNN `dense`, forward and forward+backward."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from keras_vit.kernels import torch_backend

    patch, hidden, _, _, mlp = ARCHS[arch]
    rows = batch * (((32 if arch == "tiny" else 224) // patch) ** 2 + 1)
    gen = np.random.default_rng(0)
    out = []
    for d_in, d_out in ((hidden, 3 * hidden), (hidden, hidden), (hidden, mlp), (mlp, hidden)):
        x = torch.from_numpy(gen.standard_normal((rows, d_in), dtype=np.float32))
        w = torch.from_numpy(gen.standard_normal((d_in, d_out), dtype=np.float32))
        b = torch.zeros(d_out, requires_grad=True)
        w.requires_grad_(True)
        paths = {"default": lambda x, w, b: F.linear(x, w.T, b), "onednn": torch_backend.autograd_linear()}
        times = {}
        for _ in range(reps):
            for name, fn in paths.items():
                with torch.no_grad():
                    start = time.perf_counter()
                    fn(x, w, b)
                    fwd = time.perf_counter() - start
                start = time.perf_counter()
                fn(x, w, b).sum().backward()
                both = time.perf_counter() - start
                best = times.get(name, (float("inf"), float("inf")))
                times[name] = (min(best[0], fwd), min(best[1], both))
        flops = 2 * rows * d_in * d_out
        (df, db), (of, ob) = times["default"], times["onednn"]
        out.append(
            f"| {rows}x{d_in} @ {d_in}x{d_out} | {df * 1e3:.1f} | {of * 1e3:.1f} | {df / of:.2f}x"
            f" | {flops / df / 1e9:.0f} / {flops / of / 1e9:.0f} | {db * 1e3:.1f} | {ob * 1e3:.1f} | {db / ob:.2f}x |"
        )
        print("  " + out[-1], file=sys.stderr, flush=True)
    head = [
        f"### torch: {arch} projections, float32, F.linear (default, MKL) vs oneDNN `dense`"
        f" ({torch.get_num_threads()} threads, minimum over {reps} interleaved calls)",
        "",
        "| (rows, d_in) @ (d_in, d_out) | F.linear fwd (ms) | oneDNN fwd (ms) | speed-up"
        " | GFLOP/s default / oneDNN | F.linear fwd+bwd (ms) | oneDNN fwd+bwd (ms) | speed-up |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    return "\n".join(head + out) + "\n"


def _ms(value):
    """Milliseconds to one decimal, or three where that would round a short call to 0.0."""
    return f"{value:.1f}" if value >= 1 else f"{value:.3f}"


def _whole_model(arch, **kwargs):
    """The `--arch` ViT at 224 px (32 px for "tiny") and that image size."""
    import keras_vit

    patch, hidden, layers, heads, mlp = ARCHS[arch]
    image = 32 if arch == "tiny" else 224
    model = keras_vit.ViT(image_size=image, patch_size=patch, hidden_size=hidden,
                          num_layers=layers, num_heads=heads, mlp_dim=mlp, classes=1000, **kwargs)
    return model, image


def _interleaved(calls, reps):
    """Seconds of each named call, `reps` rounds of one call each in turn, after
    an untimed first round (which compiles)."""
    times = {name: [] for name in calls}
    for repeat in range(reps + 1):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            if repeat:
                times[name].append(time.perf_counter() - start)
    return times


def _predict_rows(arch, batch, reps, dtype="float32"):
    """img/s of `model.predict` (median and best of `reps` calls after one warm-up)."""
    import contextlib
    import statistics

    import keras
    import numpy as np

    from keras_vit import kernels

    model, image = _whole_model(arch, dtype=dtype)
    x = np.random.default_rng(0).standard_normal((batch, image, image, 3), dtype=np.float32)
    backend = keras.backend.backend()
    # (model, context): torch's oneDNN projections as the library chooses them
    # on this machine, off, and forced on; the `for_inference()` copy keeps
    # its kernels packed in oneDNN's layout.
    modes = {"": (model, contextlib.nullcontext)}
    if backend == "torch":
        chosen = "oneDNN" if _onednn_chosen(dtype) else "F.linear"
        modes = {f"library's choice ({chosen})": (model, contextlib.nullcontext),
                 "F.linear": (model, lambda: kernels.disabled("onednn")),
                 "oneDNN": (model, lambda: kernels.forced("onednn")),
                 "oneDNN, for_inference() copy": (model.for_inference(), lambda: kernels.forced("onednn"))}

    def predict(runner, context):
        with context():
            runner.predict(x, batch_size=batch, verbose=0)

    times = _interleaved({name: lambda m=mode: predict(*m) for name, mode in modes.items()}, reps)
    lines = [f"### {backend}: {arch} {image} px `predict`, batch {batch}, {dtype}, img/s", "",
             "| path | median | best |", "|---|---:|---:|"]
    for name, t in times.items():
        lines.append(f"| {backend} {name} | {batch / statistics.median(t):.2f} | {batch / min(t):.2f} |")
    return "\n".join(lines) + "\n"


def _onednn_chosen(dtype):
    """Whether torch's "onednn" fast path pays and computes here for `dtype` operands."""
    import torch

    from keras_vit.kernels import torch_backend

    t = torch.ones(2, 2, dtype=getattr(torch, dtype))
    return torch_backend.onednn_pays(t) and torch_backend.onednn_computes(t, t, None)


def _head_tokens_rows(arch, batch, reps):
    """img/s of `predict` and `train_on_batch`: the model's call, whose last
    block computes only the class token (`keras_vit.models.forward.head_tokens`),
    against the same layers run as the model's graph (every token), interleaved."""
    import statistics

    import keras
    import numpy as np

    model, image = _whole_model(arch, classifier_activation=None)
    runners = {"whole graph": keras.Model(model.input, model.output), "cut last block": model}
    x = np.random.default_rng(0).standard_normal((batch, image, image, 3), dtype=np.float32)
    y = np.zeros((batch,), "int32")
    for runner in runners.values():
        runner.compile(optimizer=keras.optimizers.SGD(1e-6),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    steps = {
        "predict": lambda r: r.predict_on_batch(x),
        "train_on_batch": lambda r: r.train_on_batch(x, y),
    }
    backend = keras.backend.backend()
    lines = [f"### {backend}: {arch} {image} px, batch {batch}, float32: the last block cut "
             f"to the class token, img/s (median of {reps})", "",
             "| step | whole graph | cut last block | ratio |", "|---|---:|---:|---:|"]
    for step_name, step in steps.items():
        times = _interleaved({name: lambda r=runner: step(r) for name, runner in runners.items()}, reps)
        rate = {name: batch / statistics.median(t) for name, t in times.items()}
        lines.append(f"| {step_name} | {rate['whole graph']:.2f} | {rate['cut last block']:.2f} | "
                     f"{rate['cut last block'] / rate['whole graph']:.2f}x |")
    return "\n".join(lines) + "\n"


def _projection_shapes(arch, batch):
    """(rows, d_in, d_out) of every projection of one forward pass at 224 px,
    the last block's queries, output and MLP on the class tokens only."""
    patch, hidden, layers, _, mlp = ARCHS[arch]
    rows = batch * ((32 if arch == "tiny" else 224) // patch) ** 2 + batch
    shapes = []
    for block in range(layers):
        kept = batch if block == layers - 1 else rows
        shapes += [(kept, hidden, hidden), (rows, hidden, hidden), (rows, hidden, hidden),
                   (kept, hidden, hidden), (kept, hidden, mlp), (kept, mlp, hidden)]
    return shapes


def _projections(backend, shapes, dtype):
    """A call of `kernels.dense` on every shape, compiled as `predict` would be:
    XLA on jax, on tensorflow XLA in float32 and the graph runtime in bfloat16
    (`keras_vit.models.base`), eager torch without gradients."""
    import keras
    import numpy as np

    from keras_vit import kernels

    rng = np.random.default_rng(0)
    cast = lambda a: keras.ops.cast(a, dtype)  # noqa: E731
    xs = {(r, d): cast(rng.standard_normal((r, d), dtype=np.float32)) for r, d, _ in shapes}
    weights = [(cast(rng.normal(scale=0.02, size=(d, o)).astype("float32")),
                cast(np.zeros(o, "float32"))) for _, d, o in shapes]
    keys = [(r, d) for r, d, _ in shapes]

    def products(xs, weights):
        return [kernels.dense(xs[key], k, b) for key, (k, b) in zip(keys, weights)]

    if backend == "torch":
        import torch

        def call():
            with torch.no_grad():
                products(xs, weights)

        return call
    if backend == "tensorflow":
        import tensorflow as tf

        graph = tf.function(products, jit_compile=dtype == "float32")
        return lambda: [t.numpy() for t in graph(xs, weights)]
    compiled = _compiled(backend, products)
    return lambda: compiled(xs, weights)


def _bf16_rows(arch, batch, reps):
    """ms of the whole model and of its projections, float32 against bfloat16."""
    import statistics

    import keras
    import numpy as np

    backend = keras.backend.backend()
    built = {d: _whole_model(arch, classifier_activation=None, dtype=d) for d in ("float32", "bfloat16")}
    models = {d: model for d, (model, _) in built.items()}
    image = built["float32"][1]
    x = np.random.default_rng(0).standard_normal((batch, image, image, 3), dtype=np.float32)
    shapes = _projection_shapes(arch, batch)
    calls = {}
    for dtype, model in models.items():
        calls[("model", dtype)] = lambda m=model: m.predict_on_batch(x)
        calls[("projections", dtype)] = _projections(backend, shapes, dtype)
    times = _interleaved(calls, reps)
    ms = {key: 1e3 * statistics.median(t) for key, t in times.items()}
    gflop = sum(2 * r * d * o for r, d, o in shapes) / 1e9
    lines = [f"### {backend}: {arch} {image} px `predict_on_batch`, batch {batch}: float32 "
             f"against bfloat16, median ms of {reps}", "",
             "| dtype | whole model | projections | rest of the model | projections GFLOP/s |",
             "|---|---:|---:|---:|---:|"]
    for dtype in ("float32", "bfloat16"):
        model, proj = ms[("model", dtype)], ms[("projections", dtype)]
        lines.append(f"| {dtype} | {_ms(model)} | {_ms(proj)} | {_ms(model - proj)} | "
                     f"{gflop / proj * 1e3:.0f} |")
    speed = {part: ms[(part, "float32")] / ms[(part, "bfloat16")] for part in ("model", "projections")}
    rest32 = ms[("model", "float32")] - ms[("projections", "float32")]
    rest16 = ms[("model", "bfloat16")] - ms[("projections", "bfloat16")]
    lines.append(f"| bf16 speed-up | {speed['model']:.2f}x | {speed['projections']:.2f}x | "
                 f"{rest32 / rest16:.2f}x | |")
    lines += ["", f"Bound on the whole model's bf16 speed-up with its other work taking no time "
              f"at all: {ms[('model', 'float32')] / ms[('projections', 'bfloat16')]:.2f}x; with "
              f"that work at its float32 time: "
              f"{ms[('model', 'float32')] / (ms[('projections', 'bfloat16')] + rest32):.2f}x."]
    return "\n".join(lines) + "\n"


def _versus_keras_hub_rows(arch, batch, reps, matmul_size=4096):
    """ms of keras_vit's model, of its projections alone and of keras-hub's
    model, and each as a share of the backend's square float32 matmul rate
    (side `matmul_size`), measured in the same process."""
    import statistics

    import keras
    import numpy as np

    from keras_vit_tools.benchmark import forward_flops
    from keras_vit_tools.benchmark_worker import _keras_model, _peak_device, _peak_products

    backend = keras.backend.backend()
    image = 32 if arch == "tiny" else 224
    x = np.random.default_rng(0).standard_normal((batch, image, image, 3), dtype=np.float32)
    x = keras.ops.convert_to_tensor(x)
    shapes = _projection_shapes(arch, batch)
    calls = {}
    for library in ("keras_vit", "keras_hub"):
        model = _keras_model(library, arch, image)
        calls[library] = lambda m=model: m.predict_on_batch(x)
        if library == "keras_vit":
            calls["keras_vit projections"] = _projections(backend, shapes, "float32")
    matmul, make = _peak_products(backend, _peak_device(backend))["float32"]
    a, b = make(matmul_size), make(matmul_size)
    calls[f"square {matmul_size} matmul"] = lambda: matmul(a, b)
    times = _interleaved(calls, reps)
    ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
    gflop = {"keras_vit": batch * forward_flops(arch, image) / 1e9,
             "keras_vit projections": sum(2 * r * d * o for r, d, o in shapes) / 1e9,
             f"square {matmul_size} matmul": 2 * matmul_size**3 / 1e9}
    gflop["keras_hub"] = gflop["keras_vit"]
    rate = {name: gflop[name] / value * 1e3 for name, value in ms.items()}
    peak = rate[f"square {matmul_size} matmul"]
    hub = ms["keras_hub"]
    lines = [f"### {backend}: {arch} {image} px `predict_on_batch`, batch {batch}, float32, "
             f"median ms of {reps} (interleaved)", "",
             "| call | ms | GFLOP/s | % of the square matmul's | keras_hub / this |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {name} | {_ms(ms[name])} | {rate[name]:.0f} | {100 * rate[name] / peak:.0f} | "
              f"{hub / ms[name]:.3f} |" for name in ("keras_vit", "keras_vit projections", "keras_hub")]
    lines.append(f"| square {matmul_size} matmul | {_ms(ms[f'square {matmul_size} matmul'])} | "
                 f"{peak:.0f} | 100 | |")
    products = ms["keras_vit projections"]
    if products < ms["keras_vit"]:
        bound = (f"at most {hub / products:.3f}x with everything but the projection products "
                 f"taking no time (attention's products and the patch embedding counted as free, "
                 f"so the true bound is lower)")
    else:
        bound = "the projection products alone took as long as the whole model here"
    lines += ["", f"keras_vit over keras_hub: {hub / ms['keras_vit']:.3f}x measured; {bound}."]
    return "\n".join(lines) + "\n"


def _xla_attention_calls(backend, q, k, v):
    """`kernels.attention` forward and forward+backward, compiled by XLA and
    traced now (on tensorflow inside `kernels.xla_compiled()`)."""
    from keras_vit import kernels

    if backend == "jax":
        import jax

        forward = jax.jit(lambda q, k, v: kernels.attention(q, k, v))
        both = jax.jit(jax.grad(lambda q, k, v: (kernels.attention(q, k, v) ** 2).sum(), argnums=(0, 1, 2)))
        jax.block_until_ready((forward(q, k, v), both(q, k, v)))
        return (lambda: jax.block_until_ready(forward(q, k, v)),
                lambda: jax.block_until_ready(both(q, k, v)))
    import tensorflow as tf

    q, k, v = map(tf.constant, (q, k, v))

    def gradients(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            loss = tf.reduce_sum(kernels.attention(q, k, v) ** 2)
        return tape.gradient(loss, [q, k, v])

    forward = tf.function(lambda q, k, v: kernels.attention(q, k, v), jit_compile=True)
    both = tf.function(gradients, jit_compile=True)
    with kernels.xla_compiled():
        forward(q, k, v), both(q, k, v)
    return lambda: forward(q, k, v).numpy(), lambda: both(q, k, v)[0].numpy()


def _attention_rows(arch, batch, reps, token_counts):
    """ms of XLA's CPU attention (jax; tensorflow compiled as its predict
    function is): the logits scaled, the queries scaled, and groups of heads."""
    import statistics

    import keras
    import numpy as np

    from keras_vit import kernels
    from keras_vit.kernels import xla

    backend = keras.backend.backend()
    if backend not in ("jax", "tensorflow"):
        return f"(no grouped attention on {backend}: only XLA's CPU path (jax, tensorflow) groups heads)\n"
    _, hidden, _, heads, _ = ARCHS[arch]
    dim = hidden // heads
    # GROUPED_ATTENTION_BYTES and whether the scale may move onto the queries.
    settings = {"logits scaled": (2**62, False), "all heads": (2**62, True), "grouped": (0, True)}
    lines = [f"### {backend}: XLA-compiled attention of {heads} heads of {dim}, batch {batch}, float32, ms "
             f"(median of {reps} interleaved calls)", "",
             "| tokens | logits (MiB) | heads per group | logits scaled fwd | queries scaled fwd | grouped fwd "
             "| speed-up | logits scaled fwd+bwd | queries scaled fwd+bwd | grouped fwd+bwd | speed-up |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    default, fold = xla.GROUPED_ATTENTION_BYTES, xla.fold_scale
    try:
        for tokens in token_counts:
            q, k, v = (np.random.default_rng(i).standard_normal((batch, tokens, heads, dim), dtype=np.float32)
                       for i in range(3))
            calls, group = {}, None
            for name, (threshold, folded) in settings.items():
                xla.GROUPED_ATTENTION_BYTES = threshold
                xla.fold_scale = fold if folded else (lambda q, scale: False)
                if threshold == 0:
                    with kernels.xla_compiled():
                        group = xla.head_group(q, k)
                calls[(name, "fwd")], calls[(name, "both")] = _xla_attention_calls(backend, q, k, v)
            ms = {key: 1e3 * statistics.median(t) for key, t in _interleaved(calls, reps).items()}
            mib = batch * heads * tokens * tokens * 4 / 2**20
            row = [f"{tokens}", f"{mib:.0f}", f"{group}"]
            for kind in ("fwd", "both"):
                timed = [ms[(name, kind)] for name in settings]
                row += [_ms(t) for t in timed] + [f"{timed[0] / timed[-1]:.2f}x"]
            lines.append("| " + " | ".join(row) + " |")
            print("  " + lines[-1], file=sys.stderr, flush=True)
    finally:
        xla.GROUPED_ATTENTION_BYTES, xla.fold_scale = default, fold
    return "\n".join(lines) + "\n"


def _attention_paths():
    """`{name: context}`: each attention fast path of this backend alone (forced,
    the others off), and the portable form."""
    import keras

    from keras_vit import kernels
    from keras_vit.kernels import registry

    names = [o.name for o in registry.registered("attention", keras.backend.backend())]
    paths = {}
    for name in names:
        others = [n for n in names if n != name]
        paths[name] = lambda n=name, o=others: _stacked(kernels.forced(n), kernels.disabled(*o))
    paths["portable"] = kernels.portable_only
    return paths


def _stacked(*contexts):
    import contextlib

    stack = contextlib.ExitStack()
    for context in contexts:
        stack.enter_context(context)
    return stack


def run(arch, batch, reps, dense_only=False):
    import contextlib

    import keras
    import numpy as np

    from keras_vit.layers import MlpBlock, MultiHeadSelfAttention, TransformerBlock

    backend = keras.backend.backend()
    dense = _dense_rows(arch, batch, reps) if backend == "torch" else ""
    if dense_only:
        return dense or f"(no dense comparison on {backend}: it is torch's)\n"
    patch, hidden, _, heads, mlp = ARCHS[arch]
    tokens = ((32 if arch == "tiny" else 224) // patch) ** 2 + 1
    x = np.random.default_rng(0).standard_normal((batch, tokens, hidden), dtype=np.float32)
    measure = _timer(reps)
    rows = []
    cases = [(f"attention, {name}", lambda: MultiHeadSelfAttention(heads, hidden // heads), context)
             for name, context in _attention_paths().items()]
    cases += [
        ("MLP", lambda: MlpBlock(mlp), contextlib.nullcontext),
        ("LayerNorm", lambda: keras.layers.LayerNormalization(epsilon=1e-6), contextlib.nullcontext),
        ("block (library default)", lambda: TransformerBlock(heads, mlp), contextlib.nullcontext),
    ]
    for name, make, context in cases:
        layer = make()
        layer.build(x.shape)
        # The paths are chosen when a call is traced: build and time inside the context.
        with context():
            forward, backward = _forward_backward(backend, layer, x)
            fwd_ms, bwd_ms = measure(forward), measure(backward)
        rows.append((name, fwd_ms, bwd_ms))
        print(f"  {name}: {fwd_ms:.1f} / {bwd_ms:.1f} ms", file=sys.stderr, flush=True)
    lines = [
        f"### {backend}: one {arch} block, batch {batch}, {tokens} tokens",
        "",
        "| piece | forward (ms) | forward + backward (ms) |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {f:.1f} | {b:.1f} |" for name, f, b in rows]
    return "\n".join(lines) + "\n" + ("\n" + dense if dense else "")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="S/16", choices=sorted(ARCHS))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--dense", action="store_true",
                        help="only the torch projection table (F.linear vs oneDNN)")
    parser.add_argument("--predict", action="store_true",
                        help="only the whole model's predict img/s (torch: F.linear vs oneDNN)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                        help="the model's dtype policy for --predict")
    parser.add_argument("--head-tokens", action="store_true",
                        help="only predict and train_on_batch img/s: the last block cut to the "
                             "class token against the whole graph")
    parser.add_argument("--bf16", action="store_true",
                        help="only the whole model and its projections, float32 against bfloat16")
    parser.add_argument("--versus-keras-hub", action="store_true",
                        help="only keras_vit's model, its projections alone and keras-hub's "
                             "model, float32: the most keras_vit could gain over keras-hub")
    parser.add_argument("--matmul-size", type=int, default=4096,
                        help="side of the square matmul --versus-keras-hub times beside the models")
    parser.add_argument("--attention", action="store_true",
                        help="only jax's CPU attention: all heads at once against groups of heads")
    parser.add_argument("--tokens", default="197,577,785,1025,1370",
                        help="comma-separated token counts for --attention")
    parser.add_argument("--output", default=None, help="append the table to PREFIX.md")
    args = parser.parse_args(argv)
    if args.attention:
        try:
            tokens = [int(t) for t in args.tokens.split(",")]
        except ValueError:
            parser.error(f"--tokens must be comma-separated integers, got {args.tokens!r}")
        table = _attention_rows(args.arch, args.batch, args.reps, tokens)
    elif args.bf16:
        table = _bf16_rows(args.arch, args.batch, args.reps)
    elif args.versus_keras_hub:
        table = _versus_keras_hub_rows(args.arch, args.batch, args.reps, args.matmul_size)
    elif args.head_tokens:
        table = _head_tokens_rows(args.arch, args.batch, args.reps)
    elif args.predict:
        table = _predict_rows(args.arch, args.batch, args.reps, args.dtype)
    else:
        table = run(args.arch, args.batch, args.reps, args.dense)
    print(table)
    if args.output:
        path = pathlib.Path(args.output + ".md")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
