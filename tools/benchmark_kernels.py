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
`--compiled` times torch's `train_on_batch` of the `--arch` width with
`--layers` blocks (2 by default): compiled (`jit_compile=True`) with the
library's paths, compiled with every op portable, and eager with "onednn"
forced, interleaved, with each first call's seconds (the compile): the
measurement behind the projection inside torch.compile.

Usage:
    KERAS_BACKEND=jax python tools/benchmark_kernels.py [--arch S/16] [--batch 16]
        [--reps 7] [--dense | --predict [--dtype bfloat16] | --head-tokens | --bf16
         | --versus-keras-hub [--matmul-size 4096] | --attention [--tokens 577,1370]
         | --compiled [--layers 2]]
        [--output PREFIX]

Prints a Markdown table (milliseconds, minimum over `--reps` calls after one
warm-up call) and, with `--output`, appends it to PREFIX.md.
"""

import argparse
import pathlib
import sys
import time

from keras_vit_tools.benchmark import ARCHS
from keras_vit_tools.benchmark_kernels_model import (
    _bf16_rows,
    _compiled,
    _compiled_train_rows,
    _head_tokens_rows,
    _interleaved,
    _ms,
    _predict_rows,
    _versus_keras_hub_rows,
)


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
    parser.add_argument("--compiled", action="store_true",
                        help="only torch's train_on_batch: compiled with the library's paths, "
                             "compiled portable, eager with oneDNN forced")
    parser.add_argument("--layers", type=int, default=2, help="blocks of the --compiled model")
    parser.add_argument("--output", default=None, help="append the table to PREFIX.md")
    args = parser.parse_args(argv)
    if args.attention:
        try:
            tokens = [int(t) for t in args.tokens.split(",")]
        except ValueError:
            parser.error(f"--tokens must be comma-separated integers, got {args.tokens!r}")
        table = _attention_rows(args.arch, args.batch, args.reps, tokens)
    elif args.compiled:
        table = _compiled_train_rows(args.arch, args.batch, args.reps, args.layers)
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
