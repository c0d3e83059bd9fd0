"""One module per checkpoint source, each a table on `keras_vit.weights.rules`.

- `official`: official vit_jax and big_vision `.npz` files (the canonical
  layout itself, plus Linen numbering, scanned blocks, big_vision's position
  embedding);
- `timm`: timm state dicts and timm Hub directories;
- `transformers`: transformers ViT/DeiT directories, read and written;
- `keras_hub`: keras-hub ViT presets, and through it `keras_hub_dinov2`
  (DINOv2 backbones) and `keras_hub_siglip` (SigLIP vision towers);
- `keras_vit`: keras_vit's own `.weights.h5` / `.keras` files.

Each reads into a `keras_vit.weights.canonical.Checkpoint`;
`keras_vit.weights.readers` picks one by file name, `keras_vit.presets` by
directory layout.
"""
