"""The work of the `keras-vit` commands (parsed in `keras_vit_tools.commands`).

`keras-vit inspect IMAGE --model ViTTi16 --weights W --out DIR` (or
`--preset HANDLE`, any `keras_vit.from_preset` handle, whose preprocessing
and class names then apply) runs the paper's inspection analyses (§4.5,
Fig. 6-7) on one image and writes
`attention_rollout.png`, `attention_distance.png`,
`position_embedding_similarity.png`, `embedding_filters.png` (plain ViTs
only) and `summary.txt` to DIR.

`keras-vit export MODEL --format F --output PATH` writes MODEL (a
constructor name such as ViTTi16 with `--weights`, or a `.keras` file) as a
serving artifact (`keras_vit.export`), runs it in its runtime on random
images, prints the largest difference from `model.predict` and exits with
status 1 above `--tolerance` (2 on unusable input).
"""

import os
import sys

import numpy as np
from keras import ops

from keras_vit import inspection, models, plots, presets
from keras_vit.architectures import CONSTRUCTORS, GELU_FLAVOURS
from keras_vit.preprocessing import (
    INTERPOLATIONS,
    MODES,
    center_crop,
    decode_predictions,
    preprocess_input,
)
from keras_vit.validation import check_choice



def load_image(image, size, crop_fraction=0.875, normalization="inception", weights=None, model=None):
    """Reads and preprocesses an image the way ViT checkpoints expect it.

    `keras_vit.preprocessing.center_crop` (bicubic, shorter side to
    `size / crop_fraction`, then the centre `size`), then
    `keras_vit.preprocess_input`. A `model` with a preprocessing record (a
    model from `keras_vit.from_preset`) sets the crop fraction, the
    interpolation and the scaling instead.

    Args:
        image: a file path, or an `(H, W, 3)` uint8 array.
        size: `(height, width)` of the model input.
        crop_fraction: float in (0, 1], default 0.875 (256 -> 224).
        normalization: "inception" (default, [-1, 1], the Google
            checkpoints), "imagenet" (ImageNet mean/std, timm and DeiT), or
            None to take it from the registered `weights`.
        weights: None, or a registered weights name (used when
            `normalization` is None).
        model: None, or a keras_vit model whose `preprocessing` applies.

    Returns:
        `(display, pixels)`: the cropped uint8 image `(height, width, 3)` and
        the normalised float32 model input of the same shape.

    Example:

    >>> image = np.full((300, 450, 3), 255, "uint8")
    >>> display, pixels = load_image(image, (224, 224))
    >>> display.shape, float(pixels.max())
    ((224, 224, 3), 1.0)
    """
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError("Reading images needs Pillow: pip install pillow") from error

    check_choice(normalization, MODES + (None,), "normalization")
    if isinstance(image, (str, os.PathLike)):
        image = np.asarray(Image.open(image).convert("RGB"))
    record = getattr(model, "preprocessing", None)
    interpolation = "bicubic"
    if record is not None:
        crop_fraction = record.crop_fraction
        if record.interpolation in INTERPOLATIONS:
            interpolation = record.interpolation
    display = center_crop(np.asarray(image, dtype="uint8"), size, crop_fraction, interpolation)
    if record is not None:
        return display, preprocess_input(display, model=model)
    return display, preprocess_input(display, mode=normalization, weights=weights)


def _build_model(name, weights, gelu):
    if name not in CONSTRUCTORS:
        raise SystemExit(
            f"keras-vit: unknown model {name!r}; choose one of {', '.join(CONSTRUCTORS)}"
        )
    constructor = getattr(models, name)
    options = {} if gelu is None else {"mlp_activation": GELU_FLAVOURS[gelu]}
    return constructor(weights=weights, classifier_activation=None, **options)


def _summary(model, logits, distances, rollout_grid, similarity):
    lines = [f"model: {model.name}, image {model.image_size}, patch {model.patch_size}"]
    if logits is not None:
        probs = ops.convert_to_numpy(ops.softmax(ops.convert_to_tensor(logits)))[0]
        top = np.argsort(probs)[::-1][:5]
        names = {}
        try:
            own = model if model.class_names is not None else None
            decoded = decode_predictions(probs[None], top=5, model=own)[0]
            names = {int(k): f" {name}" for k, (_, name, _) in zip(top, decoded)}
        except ValueError:  # neither the model's own names nor an ImageNet head
            pass
        lines.append(
            "top-5 classes: "
            + ", ".join(f"{int(k)}{names.get(int(k), '')} ({probs[k]:.3f})" for k in top)
        )
    lines.append("mean attention distance (pixels), per layer: min / mean / max over heads")
    for i, row in enumerate(distances):
        lines.append(f"  layer {i + 1:2d}: {row.min():6.1f} / {row.mean():6.1f} / {row.max():6.1f}")
    grid = rollout_grid[0]
    peak = np.unravel_index(grid.argmax(), grid.shape)
    lines.append(
        f"rollout: peak at patch (row {peak[0] + 1}, column {peak[1] + 1}); "
        f"max/mean ratio {grid.max() / grid.mean():.2f}"
    )
    gh, gw = similarity.shape[:2]
    flat = similarity.reshape(gh * gw, gh * gw)
    rows, cols = np.divmod(np.arange(gh * gw), gw)
    steps = np.maximum(
        np.abs(rows[:, None] - rows[None]), np.abs(cols[:, None] - cols[None])
    )
    def mean(mask):
        # A grid smaller than 5x5 has no pair of patches 4 apart.
        return f"{flat[mask].mean():.3f}" if mask.any() else "n/a (grid too small)"

    lines.append(
        "position embedding cosine similarity: neighbours "
        f"{mean(steps == 1)}, 4+ patches apart {mean(steps >= 4)}"
    )
    return "\n".join(lines) + "\n"


def _inspect_model_name(args):
    """`--model`, or the architecture the `--weights` file holds."""
    if args.model is not None or args.preset:
        return args.model
    from keras_vit.weights.describe import checkpoint_constructor, resolve
    from keras_vit.weights.registry import WEIGHTS

    if any(name == args.weights for _, name in WEIGHTS):
        name, what = None, f"the weights name {args.weights!r} (registered per architecture)"
    else:
        path, _ = resolve(args.weights, None)  # a missing file fails here
        name, what = checkpoint_constructor(path), f"the checkpoint {path!r}"
    if name is None:
        raise ValueError(
            f"--model is needed: {what} does not say which architecture to build. "
            f"Give --model, one of {', '.join(CONSTRUCTORS)}."
        )
    return name


def _model_and_image(args):
    if not os.path.isfile(args.image):
        raise FileNotFoundError(
            f"No image file at {args.image!r} (resolved to {os.path.abspath(args.image)!r})."
        )
    if args.preset:
        model = presets.from_preset(args.preset, classifier_activation=None)
        if model.preprocessing is not None:
            display, pixels = load_image(args.image, model.image_size, model=model)
            return model, display, pixels
        return model, *load_image(args.image, model.image_size, args.crop_fraction, args.normalization)
    model = _build_model(_inspect_model_name(args), args.weights, args.gelu)
    # A checkpoint file carries no preprocessing record; a registered name does.
    named = args.normalization is None and not os.path.exists(args.weights)
    display, pixels = load_image(
        args.image, model.image_size, args.crop_fraction, args.normalization,
        weights=args.weights if named else None,
    )
    return model, display, pixels


def inspect_command(args):
    try:
        model, display, pixels = _model_and_image(args)
    except (ValueError, OSError, ImportError) as error:
        print(f"keras-vit inspect: error: {error}", file=sys.stderr)
        return 2
    images = pixels[None]
    os.makedirs(args.out, exist_ok=True)
    out = lambda name: os.path.join(args.out, name)  # noqa: E731
    logits = model.predict_on_batch(images) if model.include_top else None
    maps, grid = inspection.attention_rollout(model, images, return_grid=True)
    distances = inspection.mean_attention_distance(model, images)
    similarity = inspection.position_embedding_similarity(model)
    written = [
        plots.plot_attention_rollout(display, maps[0], out("attention_rollout.png")),
        plots.plot_mean_attention_distance(
            distances, out("attention_distance.png"),
            title=f"{model.name}: mean attention distance",
        ),
        plots.plot_position_embedding_similarity(
            similarity, out("position_embedding_similarity.png")
        ),
    ]
    if inspection.effective_patch_size(model) == tuple(model.patch_size):
        filters = inspection.embedding_filters(model, n=min(28, model.hidden_size))
        written.append(plots.plot_embedding_filters(filters, out("embedding_filters.png")))
    text = _summary(model, logits, distances, grid, similarity)
    with open(out("summary.txt"), "w") as handle:
        handle.write(text)
    written.append(out("summary.txt"))
    sys.stdout.write(text + "wrote: " + ", ".join(written) + "\n")
    return 0


def resolve_model(spec, weights=None, gelu=None, image_size=None):
    """The model a command names: a `.keras` file or a constructor name.

    Args:
        spec: path of a `.keras` model, or a keras_vit constructor name
            ("ViTTi16", "R50ViTB16", "ViT").
        weights: for a constructor: None, a registered name or a checkpoint.
        gelu: for a constructor: None or a key of `GELU_FLAVOURS` ("tanh",
            "erf").
        image_size: for a constructor: None or an int / `(height, width)`.

    Returns:
        A built Keras model.
    """
    import keras

    import keras_vit

    if spec.endswith(".keras"):
        if weights is not None:
            raise ValueError(
                "`--weights` applies to a constructor name, not to a .keras file. "
                f"Received: model={spec!r}, weights={weights!r}"
            )
        if not os.path.exists(spec):
            raise ValueError(f"No .keras file at {spec!r}.")
        return keras.saving.load_model(spec)
    constructor = getattr(keras_vit, spec, None)
    if not callable(constructor) or not spec[:1].isupper():
        raise ValueError(
            "MODEL must be a keras_vit constructor name (e.g. ViTTi16) or a .keras "
            f"file. Received: {spec!r}"
        )
    options = {"weights": weights}
    if gelu is not None:
        options["mlp_activation"] = GELU_FLAVOURS[gelu]
    if image_size is not None:
        options["image_size"] = image_size
    return constructor(**options)


def report(differences, tolerance):
    """Prints `max |...|` lines as `keras-vit-convert` does; returns the exit status."""
    failed = False
    for check, diff in differences.items():
        bad = not diff <= tolerance
        failed |= bad
        print(f"max |{check}| = {diff:.3g}{'  > tolerance' if bad else ''}")
    print(f"{'FAILED' if failed else 'OK'} (tolerance {tolerance:g})")
    return 1 if failed else 0


def _export_images(args, model, size):
    """The check images: `--images` files preprocessed for the model, or random ones."""
    if args.images:
        return np.stack([
            load_image(path, size, normalization=args.normalization or "inception", model=model)[1]
            for path in args.images
        ]).astype("float32"), f"{len(args.images)} given images"
    rng = np.random.default_rng(args.seed)
    images = rng.uniform(-1, 1, (args.samples, *size, model.input_shape[3])).astype("float32")
    return images, f"{args.samples} random images"


def export_command(args):
    import time

    import keras

    from keras_vit import export
    from keras_vit.validation import pair

    # int8 for ONNX and OpenVINO: the runtime's own quantizer on the float
    # graph; other formats export a Keras-quantized model.
    runtime_int8 = args.quantize == "int8" and args.format in ("onnx", "openvino")
    try:
        model = resolve_model(args.model, args.weights, args.gelu)
        if args.quantize and not runtime_int8:
            model.quantize(args.quantize)
        # At another image size the model itself is the reference: keras_vit
        # models resize their position embedding on the fly.
        height, width = pair(args.image_size or model.input_shape[1:3], "image_size")
        images, described = _export_images(args, model, (height, width))
        start = time.perf_counter()
        path = export.export_model(
            model, args.output, args.format, image_size=args.image_size,
            batch_size=args.batch_size, quantize="int8" if runtime_int8 else None,
            sample_images=images if runtime_int8 else None,
        )
        elapsed = time.perf_counter() - start
        diff, _, _ = export.verify_export(path, args.format, model, images, precision=args.precision)
    except (ValueError, ImportError, OSError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    quantized = f", quantized {args.quantize}" if args.quantize and not runtime_int8 else ""
    print(f"model: {model.name}, image {(height, width)}, {model.count_params():,} parameters{quantized}")
    print(
        f"wrote {path} (format {args.format}, {keras.backend.backend()} backend"
        + (", int8 by the runtime's quantizer" if runtime_int8 else "") + f") in {elapsed:.1f} s"
    )
    label = f"{args.format} runtime - model.predict ({described})"
    if not runtime_int8:
        return report({label: diff}, args.tolerance)
    print(f"max |{label}| = {diff:.3g} (int8 against the float model)")
    path.images = "given" if args.images else "random"
    print(path.summary())
    low = path.top1_agreement < args.min_agreement
    print(f"{'FAILED' if low else 'OK'} (top-1 agreement at least {args.min_agreement:g})")
    return 1 if low else 0


def run(args):
    """Runs the command of parsed `keras-vit` arguments; returns the exit status."""
    if args.command == "zero-shot":
        from keras_vit.cli_zero_shot import zero_shot_command

        return zero_shot_command(args)
    return {"inspect": inspect_command, "export": export_command}[args.command](args)


def main(argv=None):
    """Entry point of the `keras-vit` console script.

    Args:
        argv: list of arguments without the program name; default
            `sys.argv[1:]`.

    Returns:
        The exit status, 0 on success.
    """
    # The parser lives with the console script's front end, which answers
    # `--help` without importing Keras.
    from keras_vit_tools.commands import keras_vit_parser

    return run(keras_vit_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
