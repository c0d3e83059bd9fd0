"""Image-text retrieval with keras_vit.ImageTextModel (CLIP, MetaCLIP 2, SigLIP, SigLIP 2).

Embeds a folder of images and a list of texts with the two towers, ranks
the images for a text query and the texts for an image, and measures
recall@k of image-caption pairs in both directions (the fraction of images
whose caption is among the k best-scored texts, and of captions whose image
is among the k best-scored images).

Offline: the set is made here. scikit-image's bundled photos (an astronaut,
a cat, a cup of coffee, a rocket, the moon, ...) are written to a folder, each
with a caption of what it shows. `--images DIR` embeds your own folder
instead (rankings only: it has no captions to score).

    python examples/retrieval.py --preset hf://openai/clip-vit-base-patch32
    python examples/retrieval.py --preset DIR --images photos/ --query "a dog on a beach"
    python examples/retrieval.py --smoke    # a tiny random model, seconds (recall at chance)

Images are read as the image tower takes them: its preprocessing record's
resize and centre crop, then its scaling.
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit.tasks.images import IMAGE_SUFFIXES  # noqa: E402

# scikit-image's bundled photos and what each shows.
PHOTOS = {
    "astronaut": "a photo of an astronaut",
    "brick": "a photo of a brick wall",
    "camera": "a black and white photo of a man with a camera",
    "chelsea": "a photo of a cat",
    "coffee": "a photo of a cup of coffee",
    "coins": "a photo of old coins",
    "colorwheel": "a color wheel",
    "clock": "a photo of a clock",
    "grass": "a photo of grass",
    "gravel": "a photo of gravel",
    "hubble_deep_field": "a photo of galaxies in deep space",
    "immunohistochemistry": "a microscope image of stained tissue",
    "moon": "a photo of the surface of the moon",
    "page": "a scanned page of printed text",
    "rocket": "a photo of a rocket on its launch pad",
    "retina": "a photo of the retina of an eye",
}


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a = p.add_argument
    a("--preset", default=None, help="a two-tower checkpoint: directory or hf://org/name")
    a("--images", default=None, help="a folder of images to rank (default: the bundled photos, with captions)")
    a("--query", default="a photo of a cat", help="the text the images are ranked for")
    a("--top", type=int, default=3, help="how many results of each ranking to print")
    a("--k", type=int, nargs="+", default=[1, 5], help="the k of recall@k")
    a("--batch-size", type=int, default=16, help="images or texts per tower call")
    a("--output", default=None, help="JSON file to write the recalls to")
    a("--smoke", action="store_true", help="a tiny random model at 32 px, for tests (seconds)")
    return p


def write_photos(folder):
    """Writes the bundled photos as PNG files; returns `{file name: caption}`."""
    import skimage.data
    from PIL import Image

    captions = {}
    for name, caption in PHOTOS.items():
        image = np.asarray(getattr(skimage.data, name)())
        if image.ndim == 2:
            image = np.stack([image] * 3, axis=-1)
        file_name = f"{name}.png"
        Image.fromarray(image[..., :3].astype("uint8")).save(os.path.join(folder, file_name))
        captions[file_name] = caption
    return captions


def image_files(folder):
    """The image files of a folder, sorted."""
    names = sorted(f for f in os.listdir(folder) if f.lower().endswith(IMAGE_SUFFIXES))
    if not names:
        raise SystemExit(f"retrieval: no image files ({', '.join(IMAGE_SUFFIXES)}) in {folder!r}")
    return names


def embed_images(model, folder, names, batch_size):
    """Unit-length embeddings of the images, as the image tower takes them."""
    _, pixels = keras_vit.load_images([os.path.join(folder, n) for n in names], model.image_encoder)
    return model.encode_images(pixels, batch_size=batch_size)


def recall_at_k(scores, k):
    """Fraction of rows whose own column (the diagonal) is among their k best.

    Example:

    >>> recall_at_k(np.array([[0.9, 0.1], [0.8, 0.2]]), 1)
    0.5
    """
    own = np.diag(scores)[:, None]
    # Ties count against: a row's rank is 1 + the number of columns scored higher.
    ranks = 1 + (scores > own).sum(axis=1)
    return float(np.mean(ranks <= k))


def ranking(scores, labels, top):
    """`[(label, score), ...]` of one row of scores, best first."""
    order = np.argsort(-scores, kind="stable")[:top]
    return [(labels[i], float(scores[i])) for i in order]


def tiny_model(texts, image_size=32, seed=0):
    """A tiny random ImageTextModel (CLIP's layout) with a word-level tokenizer of `texts`."""
    import keras
    import tokenizers

    keras.utils.set_random_seed(seed)
    words = sorted({w for t in texts for w in t.lower().split()})
    vocabulary = {"<pad>": 0, "<eos>": 1, **{w: i + 2 for i, w in enumerate(words)}}
    raw = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocabulary, unk_token="<pad>"))
    raw.normalizer = tokenizers.normalizers.Lowercase()
    raw.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    raw.post_processor = tokenizers.processors.TemplateProcessing(single="$A <eos>", special_tokens=[("<eos>", 1)])
    with tempfile.TemporaryDirectory() as folder:  # the tokenizer is read into memory
        raw.save(os.path.join(folder, "tokenizer.json"))
        tokenizer = keras_vit.text.load_tokenizer(folder, max_length=16, pad_token="<pad>")
    image = keras_vit.ViT(image_size=image_size, patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
                          mlp_dim=32, include_top=False, pooling="token", projection_dim=8,
                          preprocessing={"mean": [0.5] * 3, "std": [0.5] * 3, "image_size": [image_size] * 2})
    text = keras_vit.text.TextEncoder(vocabulary_size=len(vocabulary), max_length=16, hidden_size=16, num_layers=1,
                                      num_heads=2, mlp_dim=32, eos_token_id=1, projection_dim=8)
    return keras_vit.ImageTextModel(image, text, tokenizer, logit_scale=10.0)


def _print_ranking(title, rows):
    print(title)
    for label, score in rows:
        print(f"  {score:8.3f}  {label}")


def run(args):
    if args.images:
        return _rank(args, args.images)
    # The captioned photos live only as long as the run.
    with tempfile.TemporaryDirectory(prefix="keras_vit_retrieval_") as folder:
        return _rank(args, folder)


def _rank(args, folder):
    captions = None if args.images else write_photos(folder)
    names = image_files(folder)
    texts = [captions[n] for n in names] if captions else [args.query]
    model = tiny_model(texts + [args.query]) if args.smoke else keras_vit.ImageTextModel.from_preset(args.preset)
    images = embed_images(model, folder, names, args.batch_size)
    query = model.encode_texts([args.query], batch_size=args.batch_size)
    _print_ranking(f"images for {args.query!r}:", ranking(model.scores(query, images)[0], names, args.top))
    if not captions:
        return {}
    text_embeddings = model.encode_texts(texts, batch_size=args.batch_size)
    scores = model.scores(images, text_embeddings)  # (images, captions), pairs on the diagonal
    _print_ranking(f"texts for {names[0]}:", ranking(scores[0], texts, args.top))
    results = {"images": len(names), "chance": {f"recall@{k}": min(k, len(names)) / len(names) for k in args.k}}
    results["image_to_text"] = {f"recall@{k}": recall_at_k(scores, k) for k in args.k}
    results["text_to_image"] = {f"recall@{k}": recall_at_k(scores.T, k) for k in args.k}
    print(json.dumps(results, indent=2))
    return results


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.preset is None and not args.smoke:
        raise SystemExit("retrieval: give --preset (a two-tower checkpoint) or --smoke")
    results = run(args)
    if args.output:
        with open(args.output, "w") as handle:
            json.dump(results, handle, indent=2)
    return results


if __name__ == "__main__":
    main()
