"""GPU kernels the packages share, each a Triton kernel beside its pure-torch definition.

Three operations, one module each, with the same four parts: a torch reference (the definition, the CPU path and
the test oracle), a Triton kernel (float32/float16/bfloat16, any strides), a ``torch.autograd.Function`` with the
backward, and a function that dispatches on ``impl``:

- :func:`grouped_matmul` / :func:`grouped_lora` (``segmm``): ``y_i = s x_i W_{g_i}`` and ``s (x_i A_{g_i}) B_{g_i}``,
  one weight (adapter) per row: mixed-adapter LoRA batches, routed experts.
- :func:`masked_spmm` (``spmm``): ``(A ⊙ M) X`` over a :class:`CSR` structure with a per-edge keep mask or score
  threshold evaluated in the kernel: pruned graph propagation without rebuilding the CSR.
- :func:`linear_scan` (``scan``): ``h_t = λ_t ⊙ h_{t-1} + x_t`` over time: leaky membranes, the FPT ``Λ y``,
  linear RNNs.

``impl="auto"`` runs the Triton kernel for CUDA tensors of a supported dtype and the torch reference otherwise, so
CPU users never import triton; ``impl="triton"`` also runs on CPU tensors under ``TRITON_INTERPRET=1`` (Triton's
interpreter, how the tests check the kernels without a GPU).
"""

from icml25_shared.kernels._dispatch import IMPLS, triton_available
from icml25_shared.kernels.scan import LinearScan, linear_scan, linear_scan_reference
from icml25_shared.kernels.segmm import (
    GroupedMatmul,
    grouped_lora,
    grouped_lora_reference,
    grouped_matmul,
    grouped_matmul_reference,
)
from icml25_shared.kernels.spmm import CSR, MaskedSpMM, masked_spmm, masked_spmm_reference

__all__ = [
    "IMPLS",
    "triton_available",
    "grouped_matmul",
    "grouped_lora",
    "grouped_matmul_reference",
    "grouped_lora_reference",
    "GroupedMatmul",
    "CSR",
    "masked_spmm",
    "masked_spmm_reference",
    "MaskedSpMM",
    "linear_scan",
    "linear_scan_reference",
    "LinearScan",
]
