"""The work of the `keras-vit` commands (parsed in `keras_vit_tools.commands`).

Every command names its model one way, resolved by `keras_vit.load_model`:
a constructor or architecture name (with `--weights`), a checkpoint or
`.keras` file, a preset folder or an `hf://` handle; `--gelu` and
`--preprocessing` give what a bare checkpoint file does not record.

`keras-vit inspect IMAGE --model M --out DIR` runs the paper's inspection
analyses (§4.5, Fig. 6-7) on one image and writes `attention_rollout.png`,
`attention_distance.png`, `position_embedding_similarity.png`,
`embedding_filters.png` (plain ViTs only) and `summary.txt` to DIR.

`keras-vit classify M IMAGE...` prints each image's most probable classes
(`keras_vit.classify`); an image that cannot be read is named and passed
over, and the command exits with status 1 (`keras_vit.cli.files.Failures`).

`keras-vit export M --format F --output PATH` writes the model as a serving
artifact (`keras_vit.export`), runs it in its runtime on random images,
prints the largest difference from `model.predict` and exits with status 1
above `--tolerance` (2 on unusable input).
"""

import os
import sys

import numpy as np
from keras import ops

from keras_vit import inspection
from keras_vit.architectures import GELU_FLAVOURS
from keras_vit.inspection import plots
from keras_vit.presets.resolver import load_model, untrained_reason
from keras_vit.preprocessing import Preprocessing
from keras_vit.weights.record import MODE_CROP_FRACTIONS
from keras_vit.tasks.classification import classify
from keras_vit.cli.files import Failures, image_files, readable_chunks
from keras_vit.tasks.images import load_images, read_images


def command_model(args, source=None):
    """The model a command's arguments name (`keras_vit.load_model`).

    `source` (default `args.model`), `--weights` and `--gelu`; then
    `--preprocessing` as the model's record, with the centre crop of
    `--crop-fraction` (by default the mode's, `MODE_CROP_FRACTIONS`);
    `--crop-fraction` alone changes the crop of the model's own record.
    """
    source = args.model if source is None else source
    options = {}
    if args.gelu is not None:
        options["mlp_activation"] = GELU_FLAVOURS[args.gelu]
    if source is None:
        weights = args.weights
        if weights is not None and not os.path.isfile(weights) and os.path.splitext(weights)[1]:
            raise ValueError(
                f"No checkpoint file at --weights {weights!r} (resolved to {os.path.abspath(weights)!r})."
            )
        if weights is None or not os.path.isfile(weights):
            what = "" if weights is None else f": the weights name {weights!r} is registered per architecture"
            raise ValueError(
                f"--model is needed{what}. Give --model: a constructor name (ViTTi16, ViTB16, ...) "
                "with --weights, a preset name (keras_vit.list_presets(), keras-vit presets), a checkpoint or .keras file, "
                "a preset folder or an hf:// handle."
            )
        source, weights = args.weights, None
    else:
        weights = args.weights
    model = load_model(source, weights=weights, **options)
    if getattr(args, "class_names", None) is not None:
        model.class_names = _class_names(args.class_names)
    crop = getattr(args, "crop_fraction", None)
    if args.preprocessing is not None:
        model.preprocessing = Preprocessing.from_mode(
            args.preprocessing, image_size=tuple(model.image_size),
            crop_fraction=MODE_CROP_FRACTIONS[args.preprocessing] if crop is None else crop,
        )
    elif crop is not None and getattr(model, "preprocessing", None) is not None:
        record = Preprocessing.from_config(model.preprocessing)
        model.preprocessing = record.with_crop_fraction(crop)
    return model


def _source(args):
    """What the command line named the model by, as `keras_vit.load_model` takes it
    (with the same `--weights`, `--gelu` and `--preprocessing`)."""
    return getattr(args, "preset", None) or args.model or args.weights


def _class_names(value):
    """`--class-names`: a list name of `keras_vit.labels.LISTS`, or a file of one name a line."""
    from keras_vit import labels

    if value in labels.LISTS:
        return value
    if not os.path.isfile(value):
        raise ValueError(
            f"--class-names takes {', '.join(labels.LISTS)} or a text file with one name per "
            f"line. Received: {value!r} (no such file, resolved to {os.path.abspath(value)!r})"
        )
    with open(value, encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip()]


def _needs_preprocessing(model, why=""):
    """Refuses a model without a preprocessing record, naming `--preprocessing`
    and its values; `why` says what the command needs it for."""
    if getattr(model, "preprocessing", None) is None:
        raise ValueError(
            f"{why}Model {model.name!r} does not record how its images are prepared (it was built "
            "without weights that record it, from scratch or from a checkpoint file such as an "
            f".npz): give --preprocessing {' or '.join(MODE_CROP_FRACTIONS)}: inception ([-1, 1], "
            "Google's checkpoints, a straight resize) or imagenet (ImageNet mean/std, DeiT and timm, "
            "the centre 0.875 after resizing), with --crop-fraction for another centre crop."
        )


def _summary(source, model, logits, distances, rollout_grid, similarity):
    lines = [f"model: {source}, image {model.image_size}, patch {model.patch_size}"]
    if logits is not None:
        probs = np.asarray(logits, "float32")[0]
        if getattr(model, "classifier_activation", None) is None:
            probs = ops.convert_to_numpy(ops.softmax(ops.convert_to_tensor(probs)))
        count = min(5, len(probs))
        top = np.argsort(probs)[::-1][:count]
        # Names only from the model's record: a 1000-wide head is not ImageNet's by its width.
        own = model.class_names or {}
        names = {int(i): f" {own[int(i)]}" for i in top} if own else {}
        lines.append(
            f"top-{count} classes: "
            + ", ".join(f"{int(i)}{names.get(int(i), '')} ({probs[i]:.3f})" for i in top)
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


def _warn_untrained(command, source, weights):
    """A model built from scratch is a fair input to inspect or export (the
    untrained baseline, a benchmark), never one to mistake for a trained one."""
    reason = untrained_reason(source, weights)
    if reason is not None:
        print(f"keras-vit {command}: warning: {reason}", file=sys.stderr, flush=True)


def _model_and_image(args):
    if not os.path.isfile(args.image):
        raise FileNotFoundError(
            f"No image file at {args.image!r} (resolved to {os.path.abspath(args.image)!r})."
        )
    if args.preset and args.model:
        raise ValueError("Give --model or --preset, not both: each names the whole model.")
    _warn_untrained("inspect", args.preset or args.model, args.weights)
    model = command_model(args, args.preset or args.model)
    if model.preprocessing is None and args.preprocessing is None:
        _needs_preprocessing(model)
    display, pixels = load_images(args.image, model)
    return model, display[0], pixels[0]


def inspect_command(args):
    try:
        model, display, pixels = _model_and_image(args)
    except (ValueError, OSError, ImportError) as error:
        print(f"keras-vit inspect: error: {error}", file=sys.stderr)
        return 2
    images = pixels[None]
    os.makedirs(args.out, exist_ok=True)
    out = lambda name: os.path.join(args.out, name)  # noqa: E731
    outputs = model.predict_on_batch(images) if model.include_top else None
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
    text = _summary(_source(args), model, outputs, distances, grid, similarity)
    with open(out("summary.txt"), "w") as handle:
        handle.write(text)
    written.append(out("summary.txt"))
    sys.stdout.write(text + "wrote: " + ", ".join(written) + "\n")
    return 0


def classify_command(args):
    """Prints each image's most probable classes, one line per class;
    returns the exit status (1 when some images could not be read, 2 on
    unusable input)."""
    failures = Failures("classify")
    try:
        reason = untrained_reason(args.model, args.weights)
        if reason is not None:
            raise ValueError(reason)
        model = command_model(args)
        _needs_preprocessing(model)
        for chunk in readable_chunks(args.images, args.batch_size, failures):
            results = classify(model, [image for _, _, image in chunk], top=args.top, batch_size=args.batch_size,
                               verbose=0)
            width = max(len(str(p.index)) for predictions in results for p in predictions)
            for (path, _, _), predictions in zip(chunk, results):
                print(path)
                for prediction in predictions:
                    name = prediction.name if prediction.name is not None else "(unnamed)"
                    print(f"  {prediction.probability:6.3f}  {prediction.index:>{width}}  {name}")
            sys.stdout.flush()
    except (ValueError, OSError, ImportError) as error:
        print(f"keras-vit classify: error: {error}", file=sys.stderr)
        return 2
    return failures.status(len(args.images))


def report(differences, tolerance):
    """Prints `max |...|` lines as `keras-vit-convert` does; returns the exit status.

    Example:

    >>> report({"onnx runtime - model.predict": 3e-6}, tolerance=1e-4)
    max |onnx runtime - model.predict| = 3e-06
    OK (tolerance 0.0001)
    0
    """
    failed = False
    for check, diff in differences.items():
        bad = not diff <= tolerance
        failed |= bad
        print(f"max |{check}| = {diff:.3g}{'  > tolerance' if bad else ''}")
    print(f"{'FAILED' if failed else 'OK'} (tolerance {tolerance:g})")
    return 1 if failed else 0


# Random check images of a raw-image artifact: sizes around the model's,
# none of them its own (the artifact resizes each).
_RAW_SIZES = ((1.6, 2.3), (3.1, 1.2), (0.7, 0.9))


def _raw_export_images(args, model, size):
    """The check images of a raw-image artifact: `--images` files as they are, or random photos-to-be."""
    if args.images:
        return read_images(args.images), f"{len(args.images)} given images"
    rng = np.random.default_rng(args.seed)
    shapes = [(int(size[0] * a) + 3, int(size[1] * b) + 5) for a, b in _RAW_SIZES]
    images = [rng.integers(0, 256, (*shapes[i % len(shapes)], model.input_shape[3]), dtype="uint8")
              for i in range(args.samples)]
    return images, f"{args.samples} random uint8 images of other sizes"


def _export_images(args, model, size):
    """The check images: `--images` files preprocessed for the model, or random ones."""
    if getattr(args, "raw_images", False):
        return _raw_export_images(args, model, size)
    if args.images:
        _needs_preprocessing(model)
        record = Preprocessing.from_config(model.preprocessing).for_image_size(size)
        _, images = load_images(args.images, model, preprocessing=record)
        return images, f"{len(args.images)} given images"
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
        _warn_untrained("export", args.model, args.weights)
        model = command_model(args)
        if getattr(args, "raw_images", False):
            _needs_preprocessing(model, "--raw-images bakes the model's resize, crop and scaling into the "
                                        "artifact. ")
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
            sample_images=images if runtime_int8 else None, raw_images=bool(getattr(args, "raw_images", False)),
        )
        elapsed = time.perf_counter() - start
        diff, _, _ = export.verify_export(path, args.format, model, images, precision=args.precision)
    except (ValueError, ImportError, OSError, RuntimeError) as error:
        print(f"keras-vit export: error: {error}", file=sys.stderr)
        return 2
    quantized = f", quantized {args.quantize}" if args.quantize and not runtime_int8 else ""
    print(f"model: {_source(args)}, image {(height, width)}, {model.count_params():,} parameters{quantized}")
    print(
        f"wrote {path} (format {args.format}, {keras.backend.backend()} backend"
        + (", int8 by the runtime's quantizer" if runtime_int8 else "") + f") in {elapsed:.1f} s"
    )
    _print_metadata(path, args.format)
    reference = "keras_vit.classify" if getattr(args, "raw_images", False) else "model.predict"
    label = f"{args.format} runtime - {reference} ({described})"
    if not runtime_int8:
        return report({label: diff}, args.tolerance)
    print(f"max |{label}| = {diff:.3g} (int8 against the float model)")
    path.images = "given" if args.images else "random"
    print(path.summary())
    low = path.top1_agreement < args.min_agreement
    print(f"{'FAILED' if low else 'OK'} (top-1 agreement at least {args.min_agreement:g})")
    return 1 if low else 0


def _print_metadata(path, format):
    """One line: what the artifact carries (`keras_vit.export.read_metadata`)."""
    from keras_vit.export import read_metadata

    meta = read_metadata(path, format)
    names = meta.get("class_names")
    record = meta.get("preprocessing")
    said = [f"{len(names)} class names" if names else "no class names"]
    said.append("preprocessing" if record else "no preprocessing")
    said.append("takes uint8 images of any size" if meta.get("raw_images") else "takes preprocessed images")
    print("carries: " + ", ".join(said))
    if record:
        print("inputs: " + meta["inputs"])


def run(args):
    """Runs the command of parsed `keras-vit` arguments; returns the exit status."""
    if getattr(args, "images", None):
        try:
            args.images = image_files(args.images, output=getattr(args, "out", None))
        except ValueError as error:
            print(f"keras-vit {args.command}: error: {error}", file=sys.stderr)
            return 2
    if args.command in ("depth", "segment"):
        from keras_vit.cli import dense as cli_dense

        return getattr(cli_dense, f"{args.command}_command")(args)
    if args.command == "zero-shot":
        from keras_vit.cli.zero_shot import zero_shot_command

        return zero_shot_command(args)
    if args.command == "presets":
        from keras_vit.cli.presets import presets_command

        return presets_command(args)
    if args.command in ("detect", "masks"):
        from keras_vit.cli import tasks

        return {"detect": tasks.detect_command, "masks": tasks.masks_command}[args.command](args)
    commands = {"inspect": inspect_command, "classify": classify_command, "export": export_command}
    return commands[args.command](args)
