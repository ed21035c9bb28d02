"""Image augmentations of the aleatoric MC estimator H_T (Sec. 4.1): JPEG q = 10 / 30, Gaussian noise, blur.

Images are (H, W, 3) uint8 arrays (or float arrays in [0, 1], returned in the same form). The released setting's
noise is "5000" without a unit; we read it as a variance on the 0–255 scale (σ ≈ 70.7), and "blur 5" as a Gaussian
kernel of size 5 (σ = 1.1, OpenCV's rule for that size).
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np

from icml25_shared.validate import check_array, check_float, check_int

__all__ = ["AUGMENTATIONS", "gaussian_blur", "gaussian_noise", "jpeg", "augment"]


def _as_uint8(image: np.ndarray) -> tuple[np.ndarray, bool]:
    arr = check_array("image", image, ndim=3, dtype="numeric", finite=True)
    if arr.shape[-1] != 3:
        raise ValueError(f"image must have shape (H, W, 3), got {arr.shape}")
    if arr.dtype == np.uint8:
        return arr, False
    if arr.min() < 0 or arr.max() > 1:
        raise ValueError("image must be uint8 or float in [0, 1]")
    return np.round(arr * 255).astype(np.uint8), True


def _back(img: np.ndarray, was_float: bool) -> np.ndarray:
    return (img.astype(np.float32) / 255.0) if was_float else img


def jpeg(image: np.ndarray, quality: int = 10) -> np.ndarray:
    """JPEG round trip through Pillow at ``quality``."""
    from PIL import Image

    quality = check_int("quality", quality, min=1, max=95)
    img, was_float = _as_uint8(image)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=quality)
    return _back(np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")), was_float)


def gaussian_noise(image: np.ndarray, variance: float = 5000.0, *, seed: int = 0) -> np.ndarray:
    """Additive Gaussian noise of ``variance`` on the 0–255 scale, clipped."""
    variance = check_float("variance", variance, min=0.0)
    img, was_float = _as_uint8(image)
    rng = np.random.default_rng(seed)
    noisy = img.astype(np.float64) + rng.normal(0.0, np.sqrt(variance), img.shape)
    return _back(np.clip(np.round(noisy), 0, 255).astype(np.uint8), was_float)


def gaussian_blur(image: np.ndarray, kernel: int = 5) -> np.ndarray:
    """Gaussian blur with a ``kernel × kernel`` support and σ = 0.3((k − 1)/2 − 1) + 0.8."""
    from scipy.ndimage import gaussian_filter

    kernel = check_int("kernel", kernel, min=1)
    if kernel % 2 == 0:
        raise ValueError(f"kernel must be odd, got {kernel}")
    img, was_float = _as_uint8(image)
    sigma = 0.3 * ((kernel - 1) * 0.5 - 1) + 0.8
    radius = kernel // 2
    out = gaussian_filter(img.astype(np.float64), sigma=(sigma, sigma, 0), truncate=radius / sigma, mode="reflect")
    return _back(np.clip(np.round(out), 0, 255).astype(np.uint8), was_float)


AUGMENTATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "none": lambda im: np.array(im, copy=True),
    "jpeg_q10": lambda im: jpeg(im, 10),
    "jpeg_q30": lambda im: jpeg(im, 30),
    "noise": lambda im: gaussian_noise(im),
    "blur": lambda im: gaussian_blur(im),
}
"""The five transformations t of H_T (uniform weights)."""


def augment(image: np.ndarray, names: tuple[str, ...] = tuple(AUGMENTATIONS)) -> list[np.ndarray]:
    """``image`` under each named augmentation."""
    if isinstance(names, str):
        raise ValueError(f"names must be a tuple of augmentation names, got the string {names!r} (use ({names!r},))")
    for n in names:
        if n not in AUGMENTATIONS:
            raise ValueError(f"names must be among {list(AUGMENTATIONS)}, got {n!r}")
    return [AUGMENTATIONS[n](image) for n in names]
