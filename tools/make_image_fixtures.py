#!/usr/bin/env python3
"""Builds the image fixtures under tests/data/images/: small procedurally drawn images and the
pixel values Hugging Face's ViTImageProcessor computes from them. Its PIL backend
(ViTImageProcessorPil, what ViTImageProcessor is without torchvision and what it always was
before transformers 5) is the reference: models/vision/image.cc follows PIL's resampling.

    .venv/bin/pip install transformers pillow torch safetensors
    .venv/bin/python tools/make_image_fixtures.py

Writes:
  gradient.png        45x37 RGB, smooth gradients plus a sharp checker patch
  gradient_grey.png   the same in greyscale (decoded to RGB by replication)
  photo.jpg           45x37 RGB JPEG, 4:4:4, quality 95 (decoders differ by rounding only)
  tiny.ppm            7x5 binary PPM (P6)
  preprocessor_config.json  ViTImageProcessor settings: 24x24, bilinear, rescale, normalise
  reference.safetensors
    <image>.rgb             [h, w, 3] u8, the image as PIL decodes it (convert("RGB"))
    <image>.pixel_values    [1, 3, 24, 24] f32, the processor's output
    gradient.bicubic_64x56  [1, 3, 64, 56] f32, resample=3 and an upscaling size
    gradient.resize.<f>_<h>x<w>  [h, w, 3] u8, PIL's Image.resize for filter <f>
"""
import json
import os

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from transformers import ViTImageProcessorPil

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "images")

CONFIG = {
    "image_processor_type": "ViTImageProcessor",
    "do_resize": True,
    "size": {"height": 24, "width": 24},
    "resample": 2,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.485, 0.456, 0.406],
    "image_std": [0.229, 0.224, 0.225],
}

FILTERS = {"lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}


def draw(height, width):
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = 255 * x / (width - 1)
    g = 255 * (0.5 + 0.5 * np.sin(x / 4.0 + y / 5.0))
    b = 255 * y / (height - 1)
    rgb = np.stack([r, g, b], axis=-1)
    checker = ((y // 3 + x // 3) % 2 == 0)[..., None]
    box = (y >= 10) & (y < 25) & (x >= 20) & (x < 38)
    rgb = np.where(box[..., None], np.where(checker, 250.0, 5.0), rgb)
    return np.clip(np.round(rgb), 0, 255).astype(np.uint8)


def processor(**overrides):
    config = dict(CONFIG, **overrides)
    config.pop("image_processor_type")
    return ViTImageProcessorPil(**config)


def pixel_values(proc, image):
    return proc(images=image, return_tensors="pt")["pixel_values"].to(torch.float32).contiguous()


def main():
    os.makedirs(ROOT, exist_ok=True)
    rgb = draw(37, 45)
    Image.fromarray(rgb).save(os.path.join(ROOT, "gradient.png"))
    Image.fromarray(rgb).convert("L").save(os.path.join(ROOT, "gradient_grey.png"))
    Image.fromarray(rgb).save(os.path.join(ROOT, "photo.jpg"), quality=95, subsampling=0)
    Image.fromarray(draw(5, 7)).save(os.path.join(ROOT, "tiny.ppm"))
    with open(os.path.join(ROOT, "preprocessor_config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")

    proc = processor()
    tensors = {}
    for name, file in [("gradient", "gradient.png"), ("gradient_grey", "gradient_grey.png"),
                       ("photo", "photo.jpg"), ("tiny", "tiny.ppm")]:
        image = Image.open(os.path.join(ROOT, file)).convert("RGB")
        tensors[name + ".rgb"] = torch.from_numpy(np.array(image)).contiguous()
        tensors[name + ".pixel_values"] = pixel_values(proc, image)

    image = Image.open(os.path.join(ROOT, "gradient.png")).convert("RGB")
    tensors["gradient.bicubic_64x56"] = pixel_values(
        processor(size={"height": 64, "width": 56}, resample=3), image)
    for filter_name, code in FILTERS.items():
        for h, w in [(24, 24), (16, 60), (80, 45), (8, 40)]:
            resized = np.array(image.resize((w, h), resample=code))
            tensors[f"gradient.resize.{filter_name}_{h}x{w}"] = torch.from_numpy(resized).contiguous()
    save_file(tensors, os.path.join(ROOT, "reference.safetensors"))
    print(f"wrote {len(tensors)} tensors to {ROOT}")


if __name__ == "__main__":
    main()
