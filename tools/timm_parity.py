"""keras_vit against timm itself, architecture by architecture: each is made
at random by `timm.create_model` in a tiny size (`tiny_arguments`: width 32
in 2 heads, 2 blocks, 32-pixel images), written by timm's `save_for_hf`,
loaded with `keras_vit.from_preset`, and its output and `forward_features`
compared with timm's on the same images, on the current Keras backend.

The tests run one architecture of each family (`tests/test_timm_zoo.py`);
this tool runs them all.

Usage:
    KERAS_BACKEND=jax python tools/timm_parity.py                # every architecture keras_vit builds
    python tools/timm_parity.py "vit_relpos_*" eva02_large_patch14_448   # some, by timm pattern
"""

import argparse
import fnmatch
import sys
import tempfile
import time

import numpy as np

if __package__:
    from .torchvision_stub import import_timm
else:  # `python tools/timm_parity.py`: this file's folder is on the path
    from torchvision_stub import import_timm

# The size of every tiny model: width 32 in 2 heads (16 wide, even for
# differential attention), 2 blocks, 5 classes, 32-pixel images.
TINY = dict(embed_dim=32, depth=2, num_heads=2, num_classes=5, img_size=32)
IMAGE_SIZE = 32
TOLERANCE = 1e-4


def tiny_arguments(name, **changes):
    """`timm.create_model` arguments making `name` tiny (`TINY`; patches of
    8, except for a hybrid, which keeps its ResNet and patch size: a grid of
    1 x 1 or 2 x 2, and the width of a convolution stem that embeds the
    patches itself; attention pools with 8 heads get 4; per-block key/value
    heads are 2, then 1)."""
    from keras_vit.weights.formats.timm_architectures import ARCHITECTURES

    args = dict(TINY)
    entry = ARCHITECTURES[name]["args"]
    embed = entry.get("embed_layer")
    if not isinstance(embed, dict):
        args["patch_size"] = 8
    elif embed.get("proj") is False:  # a stem whose last convolution embeds: its width
        args["embed_dim"] = embed["backbone"]["stages"][-1]["out"]
    if entry.get("attn_pool_num_heads"):
        args["attn_pool_num_heads"] = 4
    if isinstance(entry.get("num_kv_heads"), list):
        # One count per block: the first block's as its queries, the second grouped.
        args["num_kv_heads"] = [2, 1]
    return {**args, **changes}


def randomise(model, seed, scale=0.2):
    """Moves every floating-point tensor of a torch model off its initial
    value (norms, LayerScale, tokens, lambdas too), so that a mapping that
    drops or swaps one shows; returns the model in eval mode."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.dtype.is_floating_point:
                tensor.add_(scale * torch.randn(tensor.shape, generator=generator))
    return model.eval()


def make(timm, name, directory, seed=0, **changes):
    """A tiny random timm model of architecture `name`, written to
    `directory` by timm's `save_for_hf`; returns the model. timm's own
    initialisation is seeded too, so that a seed makes one model; the noise
    shrinks with the width (0.2 at 32), keeping activations of one size."""
    import torch

    torch.manual_seed(seed)
    args = tiny_arguments(name, **changes)
    scale = 0.2 * min(1.0, (TINY["embed_dim"] / args["embed_dim"]) ** 0.5)
    model = randomise(timm.create_model(name, pretrained=False, **args), seed, scale)
    timm.models.save_for_hf(model, str(directory), safe_serialization=True)
    return model


def images(size=IMAGE_SIZE, seed=0, batch=2):
    return np.random.default_rng(seed).normal(size=(batch, size, size, 3)).astype("float32")


def outputs(model, x):
    """timm's `(model(x), forward_features(x))` for NHWC images, as NumPy."""
    import torch

    with torch.no_grad():
        tensor = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        return model(tensor).numpy(), model.forward_features(tensor).numpy()


def compare(timm, name, seed=0):
    """`(output difference, features difference)` of keras_vit and timm on `name`."""
    import keras

    import keras_vit

    with tempfile.TemporaryDirectory() as folder:
        model = make(timm, name, folder, seed=seed)
        x = images(seed=seed)
        expected, features = outputs(model, x)
        loaded = keras_vit.from_preset(folder)
        got = keras.ops.convert_to_numpy(loaded(x))
        tokens = keras.ops.convert_to_numpy(loaded.forward_features(x))
    expected, features = _as_tokens(expected, got), _as_tokens(features, tokens)
    return float(np.abs(got - expected).max()), float(np.abs(tokens - features).max())


def _as_tokens(timm_array, keras_array):
    """timm's NCHW feature map (SAM's neck) as keras_vit's `(batch, h * w, channels)` tokens."""
    if timm_array.ndim == 4 and keras_array.ndim == 3:
        return timm_array.transpose(0, 2, 3, 1).reshape(keras_array.shape)
    if timm_array.ndim == 4 and keras_array.ndim == 4:
        return timm_array.transpose(0, 2, 3, 1)
    return timm_array


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("patterns", nargs="*", help="timm name patterns (default: every built one)")
    args = parser.parse_args(argv)
    import keras

    from keras_vit.families import timm_zoo

    timm = import_timm()
    names = timm_zoo.list_models()
    if args.patterns:
        names = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in args.patterns)]
    failed = []
    for name in names:
        start = time.perf_counter()
        try:
            output, features = compare(timm, name)
            ok = output <= TOLERANCE and features <= TOLERANCE
            print(f"{'ok  ' if ok else 'FAIL'} {name}: output {output:.1e}, features {features:.1e} "
                  f"({time.perf_counter() - start:.1f} s)", flush=True)
        except Exception as error:  # reported, and the run goes on
            ok = False
            print(f"FAIL {name}: {type(error).__name__}: {error}", flush=True)
        if not ok:
            failed.append(name)
    print(f"{keras.backend.backend()}, timm {timm.__version__}: {len(names) - len(failed)} of {len(names)} "
          f"architectures within {TOLERANCE} of timm" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
