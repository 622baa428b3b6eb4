#!/usr/bin/env python3
"""Hidden states of a small ViT by Hugging Face transformers: the reference for fuse's ViT test.

The model is `ViTModel` (no pooler) in a small configuration: 32-pixel images in 8-pixel patches, the `[CLS]` row
first, learned positions, pre-norm layers with LayerNorm eps 1e-12 and exact GELU. Its weights are drawn by the
generator `llama_reference.py` uses, under the names of Hugging Face's ViT checkpoints (which the Rust model reads
and the test draws by), and copied into the modules transformers names otherwise; no checkpoint is committed, only
what this script writes, `tests/data/vit_hidden.json`: the images (uniform in [-1, 1), as an image processor's
normalised pixels are about) and the last hidden state of every row.

Deps (PyPI): torch, transformers.   Usage: scripts/vit_reference.py [--out FILE]
"""

import json
import re

import torch
import transformers
from transformers import ViTConfig, ViTModel

from hidden_reference import eager_model, out_path
from llama_reference import weight

CONFIG = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    hidden_act="gelu",
    image_size=32,
    patch_size=8,
    num_channels=3,
    layer_norm_eps=1e-12,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
BATCH = 2

# transformers' module names → the checkpoints' (google/vit-base-patch16-224-in21k and the like).
CHECKPOINT_NAMES = [
    (r"^layers\.(\d+)\.attention\.q_proj\.", r"encoder.layer.\1.attention.attention.query."),
    (r"^layers\.(\d+)\.attention\.k_proj\.", r"encoder.layer.\1.attention.attention.key."),
    (r"^layers\.(\d+)\.attention\.v_proj\.", r"encoder.layer.\1.attention.attention.value."),
    (r"^layers\.(\d+)\.attention\.o_proj\.", r"encoder.layer.\1.attention.output.dense."),
    (r"^layers\.(\d+)\.mlp\.fc1\.", r"encoder.layer.\1.intermediate.dense."),
    (r"^layers\.(\d+)\.mlp\.fc2\.", r"encoder.layer.\1.output.dense."),
    (r"^layers\.(\d+)\.", r"encoder.layer.\1."),
]


def checkpoint_name(name):
    for pattern, repl in CHECKPOINT_NAMES:
        if re.match(pattern, name):
            return re.sub(pattern, repl, name)
    return name


def init_weights(model):
    """Norms' weights near 1, embeddings ±1, biases ±0.1, products' weights uniform with a spread of 1/sqrt(fan_in)
    (the patch projection's fan-in is its channels × patch pixels), each drawn by its checkpoint name."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape, name = tuple(p.shape), checkpoint_name(name)
            if "layernorm" in name and name.endswith("weight"):
                p.copy_(weight(name, shape, 0.2, 1.0))
            elif name.endswith("bias"):
                p.copy_(weight(name, shape, 0.1))
            elif len(shape) < 2 or "embeddings" in name and "projection" not in name:
                p.copy_(weight(name, shape, 1.0))
            else:
                fan_in = shape[1] if len(shape) == 2 else shape[1] * shape[2] * shape[3]
                p.copy_(weight(name, shape, (3.0 / fan_in) ** 0.5))


def main():
    out = out_path("tests/data/vit_hidden.json")
    model = eager_model(ViTModel, ViTConfig(**CONFIG), add_pooling_layer=False)
    init_weights(model)
    side, channels = CONFIG["image_size"], CONFIG["num_channels"]
    pixels = weight("pixel_values", (BATCH, channels, side, side), 1.0)
    with torch.no_grad():
        hidden = model(pixel_values=pixels).last_hidden_state
    doc = {
        "made_by": "scripts/vit_reference.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "config": CONFIG,
        "pixel_shape": list(pixels.shape),
        "hidden": [[[round(float(v), 7) for v in row] for row in image] for image in hidden],
    }
    with open(out, "w") as f:
        json.dump(doc, f)
        f.write("\n")


if __name__ == "__main__":
    main()
