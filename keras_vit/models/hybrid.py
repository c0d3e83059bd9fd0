"""`ViTHybrid`: a ViT on the feature map of a ResNet (paper §3.1)."""

import keras

from keras_vit.architectures import stem_stride
from keras_vit.layers.resnet import RESNET_NUMERICS, StdConv2D, resnet_backbone
from keras_vit.models.vit import ViT
from keras_vit.validation import check_bool, check_choice


def _check_resnet_layers(value):
    try:
        layers = tuple(value)
    except TypeError:
        layers = None
    if layers is None or not all(
        isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in layers
    ):
        raise ValueError(
            "`resnet_layers` must be a sequence of positive ints (units per "
            f"stage; () for the stem only). Received: resnet_layers={value!r}"
        )
    return layers


def _check_resnet_width(value):
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and value > 0
        and int(64 * value) > 0
        and int(64 * value) % 32 == 0
    )
    if not ok:
        raise ValueError(
            "`resnet_width` must be a positive number with int(64 * "
            "resnet_width) a multiple of 32 (the GroupNorm groups), e.g. 0.5, "
            f"1 or 2. Received: resnet_width={value!r}"
        )
    return float(value)


@keras.saving.register_keras_serializable(package="keras_vit")
class ViTHybrid(ViT):
    """Hybrid Vision Transformer: a ResNet (BiT) stem, then a ViT.

    The image goes through a ResNet with weight-standardised convolutions and
    GroupNorm (root: 7x7/2 conv and 3x3/2 max-pool; then one bottleneck stage
    per entry of `resnet_layers`, the first with stride 1, the others 2).
    The feature map is cut into `patch_size` patches (1x1 for the paper's
    hybrids, so each feature-map pixel becomes a token) and fed to the same
    Transformer as `ViT`. The effective patch size in pixels is
    `4 * 2**(len(resnet_layers) - 1) * patch_size` (`4 * patch_size` for the
    stem alone).

    Variable paths equal the official checkpoint keys (`conv_root/kernel`,
    `gn_root/gamma`, `block1/unit1/conv1/kernel`, `block1/unit1/gn_proj/beta`,
    `embedding/kernel`, `encoderblock_0/...`), with `gamma`/`beta` for the
    GroupNorm `scale`/`bias`.

    Args:
        resnet_layers: sequence of ints, bottleneck units per stage, default
            `(3, 4, 9)` (R50+ViT-B/16); `()` keeps the stem only (R+Ti/16).
        resnet_width: float, width factor, default 1.0: the root has
            `int(64 * resnet_width)` channels and stage `s` (from 0)
            bottlenecks of `int(64 * resnet_width) * 2**s`, outputs 4x that.
        patch_size: int or `(height, width)`, patch size on the feature map,
            default 1.
        weight_standardization: bool, default True: the convolutions
            standardise their kernels on every call, as the official model
            (and as fine-tuning needs). `for_inference()` returns a copy with
            the kernels standardised once and this set to False.
        resnet_numerics: "official" (default) or "timm": the ResNet's
            GroupNorm and weight-standardisation epsilons, the official
            code's or timm's (`keras_vit.layers.resnet.RESNET_NUMERICS`;
            timm's hybrids differ from the official ones by them alone;
            transformers' BiT, DPT-Hybrid's stem, computes as timm's).
        name: model name, default "vit_hybrid".
        **kwargs: every other argument of `keras_vit.ViT` (`image_size`,
            `hidden_size`, `num_layers`, `num_heads`, `mlp_dim`, `classes`,
            `weights`, ...), with the same defaults.

    Returns:
        A `keras.Model`, as `keras_vit.ViT`.

    Example:

    >>> import numpy as np
    >>> model = ViTHybrid(resnet_layers=(1, 1), resnet_width=0.5,
    ...                   image_size=32, patch_size=1, hidden_size=16,
    ...                   num_layers=1, num_heads=2, mlp_dim=32, classes=10)
    >>> model.grid_size
    (4, 4)
    >>> tuple(model(np.zeros((2, 32, 32, 3), "float32")).shape)
    (2, 10)

    Reference:
        Dosovitskiy et al., arXiv:2010.11929 (§3.1 "Hybrid Architecture");
        Kolesnikov et al., "Big Transfer (BiT)", arXiv:1912.11370.
    """

    def __init__(
        self,
        resnet_layers=(3, 4, 9),
        resnet_width=1.0,
        patch_size=1,
        weight_standardization=True,
        resnet_numerics="official",
        name="vit_hybrid",
        **kwargs,
    ):
        # Read by the hooks below, which ViT.__init__ calls while building.
        self.resnet_layers = _check_resnet_layers(resnet_layers)
        self.resnet_width = _check_resnet_width(resnet_width)
        self.resnet_numerics = check_choice(resnet_numerics, tuple(RESNET_NUMERICS), "resnet_numerics")
        self.weight_standardization = check_bool(
            weight_standardization, "weight_standardization"
        )
        super().__init__(patch_size=patch_size, name=name, **kwargs)

    def architecture_config(self):
        config = super().architecture_config()
        config.update(resnet_layers=self.resnet_layers, resnet_width=self.resnet_width)
        return config

    @property
    def stem_stride(self):
        """Downsampling of the ResNet before the patches (4, 16 or 32)."""
        return stem_stride(self.resnet_layers)

    def _stem(self, inputs, dtype):
        return resnet_backbone(
            inputs,
            self.resnet_layers,
            self.resnet_width,
            dtype=dtype,
            standardize=self.weight_standardization,
            numerics=self.resnet_numerics,
        )

    def _inference_config(self, config):
        # The copy's kernels are standardised once, below.
        return dict(config, weight_standardization=False)

    def _inference_values(self, values):
        for layer in self._flatten_layers():
            if isinstance(layer, StdConv2D) and layer.standardize:
                kernel = layer.standardized_kernel(layer.kernel)
                values[layer.kernel.path] = keras.ops.convert_to_numpy(kernel)
        return values

    def get_config(self):
        config = super().get_config()
        config["resnet_layers"] = list(self.resnet_layers)
        config["resnet_width"] = self.resnet_width
        config["weight_standardization"] = self.weight_standardization
        config["resnet_numerics"] = self.resnet_numerics
        return config
