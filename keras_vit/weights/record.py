"""`WeightsRecord`: the metadata of one published checkpoint file."""

import dataclasses

from keras_vit.architectures import CLASSIFIERS
from keras_vit.validation import check_choice

# The input scalings a checkpoint can expect (`keras_vit.preprocess_input`
# modes): "inception" maps [0, 255] to [-1, 1] (every Google checkpoint),
# "imagenet" normalises with the ImageNet mean and std (DeiT, timm).
PREPROCESSING = ("inception", "imagenet")


@dataclasses.dataclass(frozen=True)
class WeightsRecord:
    """Metadata of one published checkpoint file.

    Args:
        name: weights name, e.g. "imagenet21k".
        architecture: architecture string, e.g. "B/16".
        urls: tuple of download URLs: the primary (GCS) URL first, then
            mirrors.
        file_name: name of the file in the cache, unique over the table.
        image_size: int, the training resolution (square).
        classes: int, width of the classifier head in the file.
        representation_size: width of the Dense+tanh pre-logits layer, or
            None when the file has none.
        preprocessing: "inception" (inputs scaled to [-1, 1]) or "imagenet"
            (ImageNet mean/std), see `keras_vit.preprocess_input`.
        gelu_approximate: True when the weights were trained with the tanh
            GELU (every Google checkpoint), False for the exact erf GELU.
        license: SPDX licence identifier.
        params: int, exact parameter count of the model built for the
            record (head and pre-logits included).
        sha256: hex digest of the file, or None when none is published.
        description: what the checkpoint is, first sentence short.
        classifier: "token" (class token) or "gap" (global average pooling).

    Example:

    >>> record = WeightsRecord(
    ...     name="my-pets", architecture="Ti/16",
    ...     urls=("https://example.com/pets.npz",), file_name="pets.npz",
    ...     image_size=224, classes=37, representation_size=None,
    ...     preprocessing="inception", gelu_approximate=True,
    ...     license="Apache-2.0", params=5_531_533, sha256=None,
    ...     description="ViT-Ti/16 fine-tuned on Oxford-IIIT Pets.")
    >>> record.key
    ('Ti/16', 'my-pets')
    """

    name: str
    architecture: str
    urls: tuple
    file_name: str
    image_size: int
    classes: int
    representation_size: object
    preprocessing: str
    gelu_approximate: bool
    license: str
    params: int
    sha256: object
    description: str
    classifier: str = "token"

    def __post_init__(self):
        if isinstance(self.urls, str) or not self.urls:
            raise ValueError(
                "`urls` must be a non-empty tuple of URLs. "
                f"Received: urls={self.urls!r}"
            )
        object.__setattr__(self, "urls", tuple(self.urls))
        check_choice(self.preprocessing, PREPROCESSING, "preprocessing")
        check_choice(self.classifier, CLASSIFIERS, "classifier")
        if self.sha256 is not None and (
            len(self.sha256) != 64
            or any(c not in "0123456789abcdef" for c in self.sha256)
        ):
            raise ValueError(
                "`sha256` must be None or 64 lower-case hex digits. "
                f"Received: sha256={self.sha256!r}"
            )
        if "/" in self.file_name or not self.file_name:
            raise ValueError(
                "`file_name` must be a bare, non-empty file name. "
                f"Received: file_name={self.file_name!r}"
            )

    @property
    def key(self):
        """`(architecture, name)`, the record's key in `WEIGHTS`."""
        return (self.architecture, self.name)
