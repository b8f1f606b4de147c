"""Host memory under glibc's allocator: handing freed memory back to the system.

glibc serves a request below its mmap threshold from its heaps and keeps the block for reuse once freed; the
threshold starts at 128 KiB and rises, up to 32 MiB, to the size of each large block freed. A sharded run frees
and reallocates blocks of that size all the time (every unit's all-gather, its gradients' reduce-scatter), so on
CPU a rank's RSS keeps what its largest moments needed, fragmented, long after. Two remedies: trim after a phase
that freed a lot (`release_freed_host_memory`), or a fixed threshold below the units' sizes
(`set_host_mmap_threshold`), which maps each such tensor on its own and unmaps it when freed, at the price of a
page fault per page of every new one. Neither has any effect on GPU memory or outside glibc.
"""

from __future__ import annotations

import ctypes

from lit_rlhf.errors import ConfigError

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
MAX_MMAP_THRESHOLD_MIB = 32  # glibc's ceiling on 64-bit systems (HEAP_MAX_SIZE / 2)

_libc = None


def libc():
    """glibc, or None where the C library is another (musl, macOS) or lacks the call."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL("libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
            _libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        except (OSError, AttributeError):
            _libc = False
    return _libc or None


def release_freed_host_memory() -> None:
    """Hands the host memory freed since the last call back to the system (glibc's malloc_trim): after a reshard,
    the whole copy a rollout gathered would otherwise stay in every rank's RSS."""
    if (lib := libc()) is not None:
        lib.malloc_trim(0)


def check_mmap_threshold(mib) -> int | None:
    """The trainer.strategy.host_mmap_threshold_mib setting checked: None, or whole MiB in [1, 32]."""
    if mib is None:
        return None
    if isinstance(mib, bool) or not isinstance(mib, int) or not 1 <= mib <= MAX_MMAP_THRESHOLD_MIB:
        raise ConfigError(f"trainer.strategy.host_mmap_threshold_mib={mib!r} must be a whole number of MiB from 1 to "
                          f"{MAX_MMAP_THRESHOLD_MIB} (glibc's ceiling), e.g. 1; or null to keep glibc's default.")
    if libc() is None:
        raise ConfigError(f"trainer.strategy.host_mmap_threshold_mib={mib} sets glibc's mmap threshold, and this "
                          f"system's C library is not glibc; leave it null here.")
    return mib


def set_host_mmap_threshold(mib: int) -> None:
    """From now on, host tensors of at least mib MiB are mapped on their own and unmapped when freed."""
    if not libc().mallopt(M_MMAP_THRESHOLD, mib * 2**20):
        raise ConfigError(f"trainer.strategy.host_mmap_threshold_mib={mib}: glibc refused this threshold; use a "
                          f"smaller one, or null.")
