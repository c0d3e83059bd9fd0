"""torch's bilinear resize of NHWC maps: `F.interpolate` on their channels-last view.

The "interpolate" path of `kernels.resize_bilinear` (docs/performance.md).
"""

import math

import keras

from keras_vit.kernels.registry import register
from keras_vit.kernels.torch_backend import compiling, transforms


@register("resize_bilinear", "torch", "interpolate")
def interpolate(images, size, align_corners, scale):
    """torch's bilinear kernel on the NHWC maps' channels-last view, or NotImplemented.

    The portable form gathers two rows per output row and blends them, for
    each axis: at DPT's and EoMT's sizes four maps of the output's size
    each, where `F.interpolate` reads the channels-last view (the NHWC
    tensor's `(batch, channels, height, width)` view) and writes one output,
    whose NHWC view is contiguous. For floating-point maps outside torch's
    function transforms; sizes that are tensors only outside torch.compile.

    Example:

    >>> import numpy as np
    >>> x = keras.ops.convert_to_tensor(np.arange(4, dtype="float32").reshape(1, 2, 2, 1))
    >>> keras.ops.convert_to_numpy(interpolate(x, (2, 4), False, None))[0, 0, :, 0].tolist()
    [0.0, 0.25, 0.75, 1.0]
    """
    import torch
    import torch.nn.functional as F

    if not isinstance(images, torch.Tensor) or images.dim() != 4 or not images.is_floating_point():
        return NotImplemented
    if transforms():
        return NotImplemented
    if any(isinstance(n, torch.Tensor) for n in size) and compiling():
        return NotImplemented  # a size read from a tensor would break the traced graph
    height, width = (int(n) for n in size)
    view = images.permute(0, 3, 1, 2)
    if scale is None or align_corners:
        y = F.interpolate(view, size=(height, width), mode="bilinear", align_corners=align_corners)
    else:
        # torch steps the source by 1 / scale only where the scale is given.
        scales = (float(scale), float(scale))
        if (math.floor(view.shape[2] * scales[0]), math.floor(view.shape[3] * scales[1])) != (height, width):
            return NotImplemented
        y = F.interpolate(view, scale_factor=scales, mode="bilinear", align_corners=False,
                          recompute_scale_factor=False)
    return y.permute(0, 2, 3, 1)
