"""The whole-model tables of `tools/benchmark_kernels.py`.

`--predict` (torch's projection rule on the whole model), `--head-tokens`,
`--bf16`, `--versus-keras-hub` and `--compiled`, with the helpers they share with the
block tables there: the calls are interleaved (`_interleaved`) so that a
loaded machine disturbs every path alike, and compiled as each backend's
`predict` compiles them (`_compiled`, `_projections`). Usage and options:
`tools/benchmark_kernels.py`.
"""

import time

from keras_vit_tools.benchmark import ARCHS


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


def _compiled_train_rows(arch, batch, reps, layers=2):
    """ms of a torch `train_on_batch` step: compiled (`jit_compile=True`,
    torch.compile) with the library's paths (inside a compiled graph the
    "onednn" projection stands aside and Inductor lowers the products),
    compiled with every op portable, and eager with "onednn" forced,
    interleaved; the first call's seconds (which compile) beside them."""
    import contextlib
    import statistics

    import keras
    import numpy as np

    import keras_vit
    from keras_vit import kernels

    backend = keras.backend.backend()
    if backend != "torch":
        return f"(--compiled times torch.compile's training step; the backend is {backend})\n"
    patch, hidden, _, heads, mlp = ARCHS[arch]
    image = 32 if arch == "tiny" else 224
    x = np.random.default_rng(0).standard_normal((batch, image, image, 3), dtype=np.float32)
    y = np.zeros((batch,), "int32")
    cases = {"compiled, library's paths (F.linear)": (True, contextlib.nullcontext),
             "compiled, portable": (True, kernels.portable_only),
             "eager, oneDNN forced": (False, lambda: kernels.forced("onednn"))}
    runners, first = {}, {}
    for name, (jit_compile, context) in cases.items():
        model = keras_vit.ViT(image_size=image, patch_size=patch, hidden_size=hidden, num_layers=layers,
                              num_heads=heads, mlp_dim=mlp, classes=1000, classifier_activation=None)
        model.compile(optimizer=keras.optimizers.SGD(1e-6), jit_compile=jit_compile,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

        def step(model=model, context=context):
            with context():
                model.train_on_batch(x, y)

        start = time.perf_counter()
        step()
        first[name] = time.perf_counter() - start
        runners[name] = step
    times = _interleaved(runners, reps)
    lines = [f"### torch: {arch} width, {layers} blocks, {image} px, batch {batch}, float32 "
             f"`train_on_batch`, ms (median and best of {reps})", "",
             "| path | median | best | first call (s) |", "|---|---:|---:|---:|"]
    for name, t in times.items():
        lines.append(f"| {name} | {_ms(1000 * statistics.median(t))} | {_ms(1000 * min(t))} | "
                     f"{first[name]:.3g} |")
    return "\n".join(lines) + "\n"
