"""Fine-tunes keras_vit.Segmenter on a folder of images with PNG masks or segments.

`--task semantic` (default): a folder holds `images/` and `masks/` side by
side, the files paired by name (`images/0001.jpg` with `masks/0001.png`); a
mask is a palette or grey-level PNG of class indices, 255 where a pixel has
no label (`keras_vit.tasks.dense_data.load_segmentation_folder` reads and
checks every file before training). `--task panoptic` or `instance`: the
folder holds segments instead, `instances/<name>.png` (segment ids) with
`instances/<name>.json` (`{id: class}`), or COCO's `panoptic.json` or
`instances.json` (`keras_vit.tasks.instance_data`), and EoMT learns all three
tasks; the held-out panoptic (or instance) quality is measured too. EoMT
trains with its published loss (`MaskClassificationLoss`: queries matched to
segments, at `--num-points` points per mask). `--head` chooses what is
trained:

- `eomt`: EoMT (Kerssies et al. 2025, arXiv:2503.19108), learned queries in
  the encoder's last `--num-blocks` blocks, trained end to end with the
  encoder, with masked attention annealed away block after block
  (`MaskAnnealing`) so that the model needs no mask at inference;
- `linear`: the linear protocol of the DINOv2 and DINOv3 papers, a batch
  norm and a 1x1 convolution on the frozen encoder's last-block patches;
- `both` (default): one run of each, on fresh copies of the encoder.

The encoder starts from DeiT-Tiny's ImageNet weights (`--weights`, in
../shared/weights: ViT-Ti/16, exact GELU, ImageNet mean and std) or from any
`--preset` that `keras_vit.from_preset` reads: an image model, or an EoMT
checkpoint, whose class predictor is then replaced for the folder's classes.

Offline, without `--data`, it first writes such a folder itself
(`<out>/data/train` and `<out>/data/test`): handwritten digits of
scikit-learn (8x8, upscaled) pasted in random colours, sizes and places on
textured backgrounds, each pixel labelled background or its digit's class
(`masks/`), each digit an instance (`instances/`: for `--task panoptic` the
background one "stuff" segment too), the held-out images drawn with held-out
handwriting.

It prints and writes (`<out>/results.json`) the held-out mean IoU of each
head and of the trivial baseline (every pixel the training pixels' majority
class), draws `<out>/segments.png` (held-out photos, their true masks and
each head's, with a legend of the classes) and writes each fine-tuned model
as a keras_vit preset (`<out>/eomt`, `<out>/linear`) that
`keras_vit.segment` and `keras-vit segment` read.

    python examples/segment.py --smoke            # a tiny random encoder, seconds (tests)
    python examples/segment.py                    # offline: the synthetic folder, DeiT-Tiny, both heads
    python examples/segment.py --data scenes --test-data scenes_val --head eomt \\
        --class-names background,road,car
    python examples/segment.py --data scenes --preset dinov2_small --head linear --image-size 224
    python examples/segment.py --task panoptic --head eomt   # offline: digits as instances, background as stuff
    python examples/segment.py --data coco_part --task panoptic --head eomt --image-size 224
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from examples import dense_common as common  # noqa: E402
from tools.front_end import ArgumentParser, configure_threads, quiet_imports  # noqa: E402

HEADS = ("eomt", "linear")
TASKS = ("semantic", "panoptic", "instance")
DIGITS = (0, 1, 2, 3)  # the foreground classes: 1 + DIGITS.index(d); 0 is background
SYNTHETIC_NAMES = ("background",) + tuple(f"digit {d}" for d in DIGITS)


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common_arguments(p, out=os.path.join("runs", "segment"), lr=2e-4)
    a = p.add_argument
    a("--task", default="semantic", choices=TASKS, help="semantic: masks/ of class indices; panoptic or instance: segments (instances/, or COCO's panoptic.json or instances.json), EoMT only")
    a("--threshold", type=float, default=0.5, help="--task panoptic or instance: the smallest score of a held-out segment counted (keras_vit.segment's threshold)")
    a("--num-points", type=int, default=12544, help="EoMT's loss: the points each mask is compared at (EoMT's 112**2)")
    a("--head", default="both", choices=HEADS + ("both",), help="eomt (end to end), linear (frozen encoder) or both, one run each")
    a("--linear-lr", type=float, default=3e-3, help="AdamW peak learning rate of the linear head")
    a("--class-names", default=None, help="comma-separated class names, one per class index; default: the synthetic data's, or the indices the masks hold")
    a("--num-queries", type=int, default=16, help="EoMT's queries (at least the segments of an image)")
    a("--num-blocks", type=int, default=3, help="EoMT: the encoder's last blocks that carry the queries")
    a("--masked-attention", action=argparse.BooleanOptionalAction, default=True, help="EoMT's masked attention in training, annealed to none over the first three quarters of the updates")
    a("--train-images", type=int, default=1000, help="synthetic training images written (offline run)")
    a("--test-images", type=int, default=200, help="synthetic held-out images written (offline run)")
    a("--smoke", action="store_true", help="a tiny random encoder, 32 px, 2 updates per head, for tests (seconds); with --data it trains on that folder")
    return p


def check_arguments(args):
    """This example's own flags, named before any work."""
    if args.task != "semantic" and args.head == "linear":
        raise SystemExit(f"--task {args.task} trains EoMT's queries: --head linear labels pixels only "
                         "(take --head eomt).")
    if args.num_points < 1:
        raise SystemExit(f"--num-points must be at least 1. Received: {args.num_points}")
    if not 0 <= args.threshold <= 1:
        raise SystemExit(f"--threshold must be in [0, 1]. Received: {args.threshold}")


# ----------------------------------------------------------- synthetic data


def texture(rng, size):
    """Smooth colour noise plus coloured stripes, values in [0, 255]."""
    import numpy as np
    import scipy.ndimage

    coarse = rng.uniform(0, 255, size=(4, 4, 3))
    image = scipy.ndimage.zoom(coarse, (size / 4, size / 4, 1), order=1)[:size, :size]
    yy, xx = np.mgrid[:size, :size] / size
    angle, freq = rng.uniform(0, np.pi), rng.uniform(4, 16)
    stripes = np.sin(2 * np.pi * freq * (np.cos(angle) * xx + np.sin(angle) * yy))
    image = image + 40 * stripes[..., None] * rng.uniform(-1, 1, size=3)
    return np.clip(image, 0, 255)


def make_data(rng, count, size, digit_images, digit_labels):
    """`count` images `(size, size, 3)` in [0, 255], their `(size, size)`
    masks (class indices) and instances (0 background, then each digit
    1, 2, ... in the order pasted; a later digit covers an earlier one)."""
    import numpy as np
    import scipy.ndimage

    images = np.zeros((count, size, size, 3), "float32")
    masks = np.zeros((count, size, size), "int32")
    instances = np.zeros((count, size, size), "int32")
    for n in range(count):
        image, mask = texture(rng, size), np.zeros((size, size), "int32")
        for number in range(1, rng.integers(2, 5)):
            pick = rng.integers(len(digit_images))
            side = int(rng.uniform(0.3, 0.5) * size)
            glyph = scipy.ndimage.zoom(digit_images[pick] / 16.0, side / 8, order=1)[:side, :side]
            y, x = rng.integers(0, size - side + 1, size=2)
            alpha = np.clip(glyph, 0, 1)[..., None]
            window = image[y : y + side, x : x + side]
            image[y : y + side, x : x + side] = window * (1 - alpha) + rng.uniform(0, 255, 3) * alpha
            mask[y : y + side, x : x + side][glyph > 0.5] = 1 + DIGITS.index(digit_labels[pick])
            instances[n, y : y + side, x : x + side][glyph > 0.5] = number
        images[n], masks[n] = image, mask
    return images, masks, instances


def write_folder(folder, images, masks, instances=None, stuff=False):
    """`images/NNNN.png` and `masks/NNNN.png` (palette PNGs: class indices,
    each shown in its class's colour) in `folder`; with `instances`, also
    `instances/NNNN.png` (grey: segment ids) and `instances/NNNN.json` (each
    digit's class; the background's, id 0, where `stuff`)."""
    import json

    import numpy as np
    from PIL import Image

    from keras_vit.tasks import pictures

    colours = pictures.palette(len(SYNTHETIC_NAMES)).ravel().tolist()
    for kind in ("images", "masks") + (("instances",) if instances is not None else ()):
        os.makedirs(os.path.join(folder, kind), exist_ok=True)
    for i, (image, mask) in enumerate(zip(images, masks)):
        Image.fromarray(np.round(image).astype("uint8")).save(os.path.join(folder, "images", f"{i:04d}.png"))
        indexed = Image.fromarray(mask.astype("uint8"), "P")
        indexed.putpalette(colours)
        indexed.save(os.path.join(folder, "masks", f"{i:04d}.png"))
        if instances is None:
            continue
        ids = instances[i]
        Image.fromarray(ids.astype("uint8"), "L").save(os.path.join(folder, "instances", f"{i:04d}.png"))
        classes = {str(n): int(mask[ids == n][0]) for n in np.unique(ids) if n > 0 or stuff}
        with open(os.path.join(folder, "instances", f"{i:04d}.json"), "w") as handle:
            json.dump(classes, handle)


def write_synthetic(args):
    """Writes the synthetic training and held-out folders into `<out>/data`; returns their paths."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    keep = np.isin(digits.target, DIGITS)
    images, labels = digits.images[keep], digits.target[keep]
    split = int(0.8 * len(images))  # held-out images use held-out handwriting
    rng = np.random.default_rng(args.seed)
    root = os.path.join(args.out, "data")
    folders = []
    for kind, count, part in (("train", args.train_images, slice(0, split)), ("test", args.test_images, slice(split, None))):
        folder = common.synthetic_folder(root, kind, f"Synthetic digits ({count} images, --seed {args.seed}) "
                                         "written by examples/segment.py.")
        write_folder(folder, *make_data(rng, count, args.image_size, images[part], labels[part]),
                     stuff=args.task == "panoptic")
        folders.append(folder)
    return folders


# ----------------------------------------------------------- classes, model


def class_names(args, folders, synthetic):
    """The class names (a tuple, or None for unnamed indices) and the class count."""
    if args.class_names:
        names = tuple(n.strip() for n in args.class_names.split(","))
        return names, len(names)
    if synthetic:
        return SYNTHETIC_NAMES, len(SYNTHETIC_NAMES)
    from keras_vit.tasks.dense_data import IGNORE_INDEX, read_mask
    from keras_vit.tasks.instance_data import coco_class_names, read_instance_folder

    if args.task != "semantic" and (names := coco_class_names(folders[0])):
        return tuple(names), len(names)
    largest = -1
    for folder in folders:
        if args.task == "semantic":
            maps = [read_mask(os.path.join(folder, "masks", n)) for n in os.listdir(os.path.join(folder, "masks"))]
        else:
            maps = [labels[..., 0] for _, labels in read_instance_folder(folder)]
        for labels in maps:
            labelled = labels[labels != IGNORE_INDEX]
            largest = max(largest, int(labelled.max()) if labelled.size else -1)
    if largest < 0:
        raise SystemExit(f"The labels of {', '.join(folders)} label no pixel (every one is {IGNORE_INDEX}).")
    return None, largest + 1


def build_model(args, head, classes, names):
    """A `Segmenter` with `head` on a fresh encoder (frozen for "linear")."""
    import keras_vit

    source = common.encoder_or_task(args, "Segmenter", classes=classes, class_names=names)
    if isinstance(source, keras_vit.Segmenter) and head == source.head:
        model = source  # a fine-tuned checkpoint's own head, its class predictor new
        model.preprocessing = common.processing(model, args.image_size)
        return model
    encoder = source.encoder if isinstance(source, keras_vit.Segmenter) else source
    record = common.processing(source, args.image_size)
    if head == "linear":
        encoder.trainable = False
        return keras_vit.Segmenter(encoder, classes, head="linear", class_names=names, preprocessing=record)
    blocks = min(args.num_blocks, encoder.num_layers)
    return keras_vit.Segmenter(
        encoder, classes, class_names=names, num_queries=args.num_queries, num_blocks=blocks,
        mask_probabilities=None if args.masked_attention else (0.0,) * blocks, preprocessing=record,
    )


# ----------------------------------------------------------- measuring


def confusion(predictions, masks, classes):
    """`(classes, classes)` counts of (true, predicted) over the labelled pixels (255 left out)."""
    import numpy as np

    from keras_vit.tasks.dense_data import IGNORE_INDEX

    labelled = masks != IGNORE_INDEX
    pairs = masks[labelled].astype("int64") * classes + predictions[labelled]
    return np.bincount(pairs, minlength=classes**2).reshape(classes, classes)


def mean_iou(matrix):
    """Mean over classes of intersection / union (classes with an empty union
    left out), and the per-class IoU."""
    import numpy as np

    tp = np.diag(matrix).astype("float64")
    union = matrix.sum(0) + matrix.sum(1) - tp
    return float(np.mean(tp[union > 0] / union[union > 0])), (tp / np.maximum(union, 1)).tolist()


def panoptic_quality(true, predicted, classes):
    """Panoptic quality (Kirillov et al. 2019) of predicted segments.

    `true`: `(H, W, 2)` class and segment-id maps per image (255: none);
    `predicted`: `keras_vit.segment`'s results (a segment-id map, -1 none,
    and each segment's class). A predicted and a true segment of one class
    match where their IoU is above 0.5 (pixels without a true label left
    out); PQ of a class = the matches' summed IoU / (matches + half the
    unmatched of either side), averaged over the classes that occur.
    Returns `(PQ, per-class PQ (None for a class that never occurs))`.
    """
    import numpy as np

    from keras_vit.tasks.dense_data import IGNORE_INDEX

    iou_sum, matched, unmatched = np.zeros(classes), np.zeros(classes), np.zeros(classes)
    for labels, result in zip(true, predicted):
        labelled = labels[..., 1] != IGNORE_INDEX
        truth = {int(i): int(labels[..., 0][labels[..., 1] == i][0]) for i in np.unique(labels[..., 1][labelled])}
        guesses = {s["id"]: s["label_id"] for s in result["segments"]}
        taken = set()
        for t, label in truth.items():
            inside = labels[..., 1] == t
            for g, guess in guesses.items():
                if guess != label or g in taken:
                    continue
                mine = (result["segmentation"] == g) & labelled
                iou = (inside & mine).sum() / max((inside | mine).sum(), 1)
                if iou > 0.5:
                    iou_sum[label], matched[label] = iou_sum[label] + iou, matched[label] + 1
                    taken.add(g)
                    break
            else:
                unmatched[label] += 1
        for g, guess in guesses.items():
            if g not in taken and ((result["segmentation"] == g) & labelled).any():
                unmatched[guess] += 1
    occurs = matched + unmatched > 0
    per_class = np.where(occurs, iou_sum / np.maximum(matched + 0.5 * unmatched, 1e-9), np.nan)
    return float(np.nanmean(per_class)) if occurs.any() else 0.0, [None if np.isnan(v) else float(v) for v in per_class]


def predicted_classes(model, images, batch_size=1):
    """The best class of each pixel `(n, H, W)`, from the model's per-pixel class scores
    (one image a call by default, as `keras_vit.segment` runs them: one program compiled)."""
    import numpy as np
    from keras import ops

    out = []
    for i in range(0, len(images), batch_size):
        outputs = model.predict_on_batch(images[i : i + batch_size])
        scores = model.class_log_probabilities(outputs, images.shape[1:3])
        out.append(np.argmax(ops.convert_to_numpy(scores), axis=-1))
    return np.concatenate(out).astype("int32")


def majority_baseline(train_masks, test_masks, classes):
    import numpy as np

    from keras_vit.tasks.dense_data import IGNORE_INDEX

    majority = int(np.argmax(np.bincount(train_masks[train_masks != IGNORE_INDEX].ravel(), minlength=classes)))
    miou, per_class = mean_iou(confusion(np.full_like(test_masks, majority), test_masks, classes))
    return dict(majority_class=majority, mean_iou=miou, per_class_iou=per_class)


def train_head(args, model, data, classes, held_out):
    """Trains `model` for `--steps` updates and measures it on the held-out
    images (`held_out`: their paths and true labels at their own size);
    returns its results (and writes its preset)."""
    import keras_vit
    from keras_vit.tasks.dense_training import MaskAnnealing
    from keras_vit.tasks.mask_classification import MaskClassificationLoss

    (x, y), (x_test, y_test) = data
    optimizer = common.optimizer(args.lr if model.head == "eomt" else args.linear_lr, args.steps)
    if model.head == "eomt":
        # The loss works on as many segments per image as the labels can hold:
        # the classes of class maps, else the most segments of a training image.
        most = int(y[..., 1][y[..., 1] != 255].max(initial=0)) + 1 if y.ndim == 4 else 100
        model.compile(optimizer=optimizer, loss=MaskClassificationLoss(num_points=args.num_points, max_segments=most))
    else:
        model.compile(optimizer=optimizer)
    callbacks = []
    if model.head == "eomt" and model.eomt_head.mask_probability is not None:
        callbacks.append(MaskAnnealing(steps=max(1, 3 * args.steps // 4)))
    loss, seconds = common.fit_steps(model, x, y, args, callbacks)
    labels = y_test[..., 0] if y_test.ndim == 4 else y_test
    miou, per_class = mean_iou(confusion(predicted_classes(model, x_test), labels, classes))
    result = dict(mean_iou=miou, per_class_iou=per_class, final_loss=loss, train_seconds=seconds, steps=args.steps)
    if args.task != "semantic":
        paths, truth = held_out
        stuff = (0,) if args.data_synthetic and args.task == "panoptic" else None  # the background
        found = keras_vit.segment(model, paths, task=args.task, threshold=args.threshold, stuff_classes=stuff,
                                  verbose=0)
        result["pq"], result["per_class_pq"] = panoptic_quality(truth, found, classes)
    if args.save_presets:
        result["preset"] = os.path.join(args.out, model.head)
        model.save_to_preset(result["preset"])
    return result


# ----------------------------------------------------------- pictures


def picture(models, paths, true_maps, classes, names, height=160):
    """Rows of held-out photos: the photo, then its true class map and each
    model's (`keras_vit.segment`, at the photo's size) over the photo in
    grey; the first row ends with the legend of the classes."""
    import numpy as np

    import keras_vit
    from keras_vit.tasks import pictures
    from keras_vit.tasks.images import read_images

    segments = [dict(id=c, label=names[c] if names else f"class {c}", label_id=c, score=None) for c in range(classes)]
    predicted = {head: keras_vit.segment(model, paths) for head, model in models.items()}
    rows = []
    for i, (photo, true_map) in enumerate(zip(read_images(paths), true_maps)):
        photo = common.resize_panel(photo, height)
        grey = np.repeat(photo.mean(axis=-1, keepdims=True), 3, axis=-1).astype("uint8")
        maps = [true_map] + [predicted[head][i]["segmentation"] for head in models]
        panels = [photo]
        for j, labels in enumerate(maps):
            labels = common.resize_panel(labels.astype("int32"), height, nearest=True)
            overlay = pictures.segments_picture(grey, labels, segments)
            panels.append(overlay if i == 0 and j == len(maps) - 1 else overlay[:, : photo.shape[1]])
        rows.append(panels)
    titles = ["photo", "true mask"] + [{"eomt": "EoMT", "linear": "linear (frozen encoder)"}[h] for h in models]
    return common.grid_picture(rows, titles)


# ----------------------------------------------------------- the run


def _folder(args, folder, model):
    """`(images, labels, image paths, true labels at each image's size)` of a
    folder: class maps (`masks/`) or, for --task panoptic or instance,
    class and segment-id maps."""
    from keras_vit.tasks.dense_data import load_segmentation_folder, read_mask
    from keras_vit.tasks.instance_data import load_instance_folder, read_instance_folder

    if args.task == "semantic":
        paths = common.image_files(folder)
        truth = [read_mask(os.path.join(folder, "masks", os.path.splitext(os.path.basename(p))[0] + ".png"))
                 for p in paths]
        return (*load_segmentation_folder(folder, model), paths, truth)
    paths, truth = zip(*read_instance_folder(folder, model.classes))
    return (*load_instance_folder(folder, model), list(paths), list(truth))


def load_data(args, model):
    """`((x, y), (x_test, y_test), held-out image paths, their true labels)`."""
    x, y, paths, truth = _folder(args, args.data, model)
    if args.test_data is not None:
        x_test, y_test, test_paths, test_truth = _folder(args, args.test_data, model)
        return (x, y), (x_test, y_test), test_paths, test_truth
    train, held = common.held_out(len(x), args.validation_split, args.seed)
    return (x[train], y[train]), (x[held], y[held]), [paths[i] for i in held], [truth[i] for i in held]


def main(argv=None):
    args = build_parser().parse_args(argv)
    common.check_arguments(args)
    check_arguments(args)
    configure_threads(args.threads)
    quiet_imports("tensorflow", "keras_vit")
    import keras

    if args.smoke:
        args.image_size, args.steps, args.batch_size = 32, 2, 4
        args.train_images, args.test_images, args.num_queries, args.num_blocks = 8, 4, 4, 1
        args.pictures, args.verbose, args.num_points = min(args.pictures, 2), 0, 64
    synthetic = args.data_synthetic = args.data is None
    if synthetic:
        args.data, args.test_data = write_synthetic(args)
    names, classes = class_names(args, [f for f in (args.data, args.test_data) if f], synthetic)
    results = dict(backend=keras.backend.backend(), synthetic=synthetic, classes=classes,
                   class_names=None if names is None else list(names), heads={}, args=dict(vars(args)))
    models = {}
    # Segments train EoMT's queries; the linear head labels pixels only.
    heads = ("eomt",) if args.task != "semantic" else HEADS if args.head == "both" else (args.head,)
    results["task"] = args.task
    for head in heads:
        keras.utils.set_random_seed(args.seed)
        models[head] = build_model(args, head, classes, names)
        if len(models) == 1:  # the folders, read at the first model's size and scaling (every head's)
            train, test, test_paths, truth = load_data(args, models[head])
            class_maps = [labels[..., 0] if labels.ndim == 4 else labels for labels in (train[1], test[1])]
            results.update(images=dict(train=len(train[0]), test=len(test[0])),
                           baseline=majority_baseline(*class_maps, classes))
            print(f"{len(train[0])} training and {len(test[0])} held-out images, {classes} classes; baseline "
                  f"(every pixel class {results['baseline']['majority_class']}): held-out mean IoU "
                  f"{results['baseline']['mean_iou']:.3f}")
        run = results["heads"][head] = train_head(args, models[head], (train, test), classes, (test_paths, truth))
        quality = f", {args.task} quality {run['pq']:.3f}" if "pq" in run else ""
        print(f"{head}: held-out mean IoU {run['mean_iou']:.3f} (per class "
              f"{', '.join(f'{v:.2f}' for v in run['per_class_iou'])}){quality}, {args.steps} updates in "
              f"{run['train_seconds']:.0f} s")
    if args.pictures:
        from keras_vit.tasks import pictures

        count = min(args.pictures, len(test_paths))
        true_maps = [labels[..., 0] if labels.ndim == 3 else labels for labels in truth[:count]]
        path = pictures.save_png(picture(models, test_paths[:count], true_maps, classes, names),
                                 os.path.join(args.out, "segments.png"))
        results["pictures"] = [path]
        print(f"wrote {path}")
    print(f"wrote {common.write_results(os.path.join(args.out, 'results.json'), results)}")
    return results


if __name__ == "__main__":
    main()
