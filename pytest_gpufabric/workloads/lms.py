"""Large-model support: saved activations above a size move to pinned host memory once the GPU is full enough,
and come back for the backward pass. Caffe-IBM's two knobs, on PyTorch's saved-tensor hooks:

- ``threshold_bytes`` (Caffe's ``-lms <KB>``): only tensors at least this big are offloaded;
- ``usage_fraction`` (``-lms_frac``): only once allocated memory has passed this fraction of the budget.

Standalone (imports torch and the standard library only), so the memory workload can use it in its own process.
Pinned host buffers are kept in a pool by shape and dtype: pinning is slow (seconds for gigabytes), and the same
activations come back every step. Plain pinned buffers, never CUDA managed memory: oversubscribing managed
memory can hang a shared GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


def should_offload(nbytes: int, allocated_bytes: int, threshold_bytes: int, usage_fraction: float,
                   budget_bytes: int) -> bool:
    """The policy: big enough, and the GPU full enough."""
    return nbytes >= threshold_bytes and allocated_bytes >= usage_fraction * budget_bytes


@dataclass
class LargeModelSupport:
    """``with LargeModelSupport(...):`` around a forward pass; the backward pass brings the tensors back."""

    threshold_bytes: int
    usage_fraction: float
    budget_bytes: int
    allocated: object = None  # () -> bytes allocated now; default torch.cuda.memory_allocated
    pool: dict = field(default_factory=dict)  # (shape, dtype) -> list of free pinned host tensors
    offloaded_tensors: int = 0
    offloaded_bytes: int = 0
    kept_tensors: int = 0

    def _allocated(self) -> int:
        if self.allocated is not None:
            return self.allocated()
        return torch.cuda.memory_allocated()

    @staticmethod
    def _key(tensor: torch.Tensor) -> tuple:
        return tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype

    def _host_buffer(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host tensor with the same shape *and strides*: a transposed weight must come back transposed,
        or backward takes another kernel and rounds differently."""
        free = self.pool.get(self._key(tensor))
        if free:
            return free.pop()
        return torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="cpu",
                                   pin_memory=tensor.is_cuda)

    def pack(self, tensor: torch.Tensor):
        nbytes = tensor.numel() * tensor.element_size()
        if not should_offload(nbytes, self._allocated(), self.threshold_bytes, self.usage_fraction,
                              self.budget_bytes):
            self.kept_tensors += 1
            # detached, as PyTorch's own saved variables are: the tensor itself would form a reference cycle
            # with its grad_fn that outlives the graph when no backward pass runs
            return ("kept", tensor.detach())
        host = self._host_buffer(tensor)
        host.copy_(tensor, non_blocking=True)
        self.offloaded_tensors += 1
        self.offloaded_bytes += nbytes
        return ("host", host, tensor.device)

    def unpack(self, packed):
        if packed[0] == "kept":
            return packed[1]
        _, host, device = packed
        tensor = host.to(device, non_blocking=True)
        if device.type == "cuda":
            # the host buffer may be reused only once the copy back has run
            torch.cuda.current_stream(device).synchronize()
        self.pool.setdefault(self._key(host), []).append(host)
        return tensor

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc_info):
        self._hooks.__exit__(*exc_info)
