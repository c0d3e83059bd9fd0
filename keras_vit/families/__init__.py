"""Model families: everything about one family's checkpoints in one module.

A family module holds, for each source that publishes the family, the
class that reads (and where the layout allows, writes) its checkpoints: its
config fields, defaults and tensor names, as tables on
`keras_vit.weights.rules`.

- `vit` (ViT, DeiT), `dinov2`, `dinov3`, `clip` (CLIP, MetaCLIP 2; and its
  text towers), `siglip` (SigLIP, SigLIP 2; and its text towers), `aimv2`,
  `vit_mae`;
- `owlvit` (OWL-ViT, OWLv2 detectors, for `keras_vit.tasks.detection`),
  `sam` (Segment Anything: transformers `SamModel`, keras-hub's
  `SAMBackbone`, timm's `samvit_*` image encoders, for
  `keras_vit.tasks.prompt_masks`);
- `transformers_source`, `keras_hub_source`: each source's table of
  families (`TRANSFORMERS_FAMILIES`, `KERAS_HUB_FAMILIES`) and how a
  directory of that source is read or written through it;
- `transformers_image_text`, `keras_hub_image_text`: the two-tower
  image-text layouts (CLIP, MetaCLIP 2, SigLIP, SigLIP 2), read from the
  records the `clip` and `siglip` modules hold;
- `dpt` (Depth Anything, DPT, CHMv2: `DepthEstimator`), `eomt` (EoMT on
  DINOv2 and DINOv3: `Segmenter`): checkpoints holding a task model,
  encoder and head; `task_source`: their table (`TASK_FAMILIES`) and how
  such a directory is read or written;
- `writers`: `save_to_preset`, a model as a keras_vit or transformers
  directory.

The readers of file formats (safetensors, npz, shards, downloads) and the
families' base classes stay in `keras_vit.weights`; a new family is one
module here and one entry in its source's table (`CONTRIBUTING.md`).
"""
