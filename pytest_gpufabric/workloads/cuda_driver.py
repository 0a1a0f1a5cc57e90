"""The CUDA driver API through ctypes (standard library only, shared by the workload scripts): what a copy between
pinned host memory and a GPU needs, without importing torch (3.5-5 s on an H100; the driver library loads in
milliseconds). Every call's result is checked; a failure raises DriverError naming the call and CUDA's error name.

The calls are those nvbandwidth's copy-engine tests make (cuMemcpyAsync between registered host memory and device
memory, timed by events on one stream); contexts are the devices' primary contexts, the ones torch and the CUDA
runtime use, so a script may use both."""

from __future__ import annotations

import ctypes
import mmap
from ctypes import byref, c_char_p, c_float, c_int, c_size_t, c_uint, c_uint64, c_void_p

LIBRARY = "libcuda.so.1"  # installed with the NVIDIA driver, not with a CUDA toolkit
NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE, cuInit's answer where CUDA sees no GPU


class DriverError(RuntimeError):
    """A CUDA driver call that did not return CUDA_SUCCESS, or a driver library that could not be loaded."""


class _Uuid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


def uuid_text(raw: bytes) -> str:
    """CUDA's 16 UUID bytes as torch and nvidia-smi write them (8-4-4-4-12 hex digits, without ``GPU-``)."""
    digits = raw.hex()
    return "-".join((digits[:8], digits[8:12], digits[12:16], digits[16:20], digits[20:]))


class CudaDriver:
    """The driver library, initialised (cuInit). ``library``: another path (tests)."""

    def __init__(self, library: str = LIBRARY) -> None:
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as exc:
            raise DriverError(f"the NVIDIA driver's {library} could not be loaded: {exc}") from None
        self._call("cuInit", c_uint(0))

    def _call(self, name: str, *args) -> None:
        function = getattr(self._lib, name, None)
        if function is None:
            raise DriverError(f"the NVIDIA driver's {LIBRARY} has no {name}: the driver is older than this workload "
                              "needs (CUDA 11.4's or later)")
        result = function(*args)
        if result == NO_DEVICE:
            raise DriverError(f"{name}: no CUDA device (none installed, or CUDA_VISIBLE_DEVICES hides them all)")
        if result != 0:
            text = c_char_p()
            self._lib.cuGetErrorName(result, byref(text))
            raise DriverError(f"{name} failed: {(text.value or b'CUDA error').decode()} ({result})")

    def device_count(self) -> int:
        count = c_int()
        self._call("cuDeviceGetCount", byref(count))
        return count.value

    def device(self, ordinal: int) -> int:
        handle = c_int()
        self._call("cuDeviceGet", byref(handle), c_int(ordinal))
        return handle.value

    def name(self, device: int) -> str:
        buffer = ctypes.create_string_buffer(256)
        self._call("cuDeviceGetName", buffer, c_int(len(buffer)), c_int(device))
        return buffer.value.decode(errors="replace")

    def uuid(self, device: int) -> str:
        raw = _Uuid()
        self._call("cuDeviceGetUuid_v2", byref(raw), c_int(device))
        return uuid_text(bytes(raw.bytes))

    def use_primary_context(self, device: int) -> None:
        """Make the device's primary context this thread's current one (retained until the process ends)."""
        context = c_void_p()
        self._call("cuDevicePrimaryCtxRetain", byref(context), c_int(device))
        self._call("cuCtxSetCurrent", context)

    def device_buffer(self, size: int) -> int:
        pointer = c_uint64()
        self._call("cuMemAlloc_v2", byref(pointer), c_size_t(size))
        return pointer.value

    def free_device_buffer(self, pointer: int) -> None:
        self._call("cuMemFree_v2", c_uint64(pointer))

    def pinned_host_buffer(self, size: int) -> tuple[mmap.mmap, int]:
        """``size`` bytes of host memory faulted in by this thread (so on its NUMA node) and page-locked with
        cuMemHostRegister, as torch's pinned allocator does with ``pinned_use_cuda_host_register``: the mapping
        (keep it referenced) and its address."""
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
        memory = mmap.mmap(-1, size, flags=flags)
        address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
        ctypes.memset(address, 0x5A, size)  # every page written, none left to the first copy
        self._call("cuMemHostRegister_v2", c_void_p(address), c_size_t(size), c_uint(0))
        return memory, address

    def unregister(self, address: int) -> None:
        self._call("cuMemHostUnregister", c_void_p(address))

    def stream(self) -> int:
        stream = c_void_p()
        self._call("cuStreamCreate", byref(stream), c_uint(0))
        return stream.value

    def event(self) -> int:
        event = c_void_p()
        self._call("cuEventCreate", byref(event), c_uint(0))  # CU_EVENT_DEFAULT: timing enabled
        return event.value

    def record(self, event: int, stream: int) -> None:
        self._call("cuEventRecord", c_void_p(event), c_void_p(stream))

    def elapsed_s(self, start: int, end: int) -> float:
        """Seconds between two recorded events, once ``end`` has completed."""
        self._call("cuEventSynchronize", c_void_p(end))
        milliseconds = c_float()
        self._call("cuEventElapsedTime", byref(milliseconds), c_void_p(start), c_void_p(end))
        return milliseconds.value / 1e3

    def host_to_device(self, device_pointer: int, host_address: int, size: int, stream: int) -> None:
        self._call("cuMemcpyHtoDAsync_v2", c_uint64(device_pointer), c_void_p(host_address), c_size_t(size),
                   c_void_p(stream))

    def device_to_host(self, host_address: int, device_pointer: int, size: int, stream: int) -> None:
        self._call("cuMemcpyDtoHAsync_v2", c_void_p(host_address), c_uint64(device_pointer), c_size_t(size),
                   c_void_p(stream))

    def synchronize(self, stream: int) -> None:
        self._call("cuStreamSynchronize", c_void_p(stream))


