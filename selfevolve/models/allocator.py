"""Freed memory kept for reuse: glibc's ``malloc`` settings for a run on the CPU.

PyTorch's CPU tensors come from ``malloc``. glibc serves a block larger than its mmap threshold (128 KiB at
first, raised as such blocks are freed) with a fresh ``mmap`` and unmaps it when it is freed; it also returns the
free top of the heap to the system past its trim threshold. A forward pass of 32 rows allocates and frees many
blocks of 1-20 MB (activations, key/value buffers), so the same memory was handed back to the system and
faulted in again, page by page, all through a rollout: 2.8 million page faults and 5.5 s of system time in one
run of ``benchmarks/bench_rollout.py`` (32 episodes of 8 turns, 45 s), 0.7-0.8 million and 1.4 s with the
settings below (sixth session, 2026-11-25/26, docs/benchmarks.md).

The settings: serve blocks of up to 32 MiB (glibc's largest mmap threshold on 64-bit) from the heap, and never
trim it. Freed memory stays with the process for its next allocation; the cost is that the process keeps its
peak heap until it exits. Numbers are unchanged (the same bytes are computed, only where they live differs).

In the update (:func:`heap_not_grown_by_large_blocks`) the heap stops growing for blocks of 4 MiB or more. Its forward
keeps thousands of activations of many sizes while it frees as many temporaries, and a heap that grows for all of
them ends up with as much free space between its blocks as in them: after the forward of one warm-start batch
(1,290 tokens, SmolLM2-135M) glibc's heap held 1.18 GB of blocks and 1.02 GB of free chunks, 15,776 of them
(``mallinfo2``). glibc serves a block from a free chunk that fits before it asks the system for more, and only
then looks at the mmap threshold; so within the update, blocks that fit the heap's free chunks are served from
them as before, and larger ones get an mmap of their own, handed back when freed. The forward's peak fell from
2.0 GB above the model to 1.4 GB at 1 MiB (docs/benchmarks.md, "Memory of the default run"); outside the update,
rollouts keep the settings above.

Why 4 MiB and not 1 (the threshold until 2026-11-28): every mmapped block is faulted in again, page by page, each
time the update allocates it. In the update alone (16 expert episodes, one thread, two processes at a time,
``benchmarks/bench_heap_threshold.py``) 1 MiB took 41.2 s, 4 MiB 39.3 s and no threshold 37.8 s, at 2.51,
2.83 and 2.85 GB; in the whole default run the peak was the same with each (3.44-3.48 GB), and so, within one
pair's noise, was the time (docs/benchmarks.md, "What the memory measures cost the whole run today").

Not applied when ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` is already set (the user's choice), when
``SELFEVOLVE_MALLOC=default`` (opt out), where the C library is not glibc, or where mimalloc serves ``malloc``:
the ``selfevolve`` command runs with it since 2026-12-05 (``selfevolve/launch.py``), because even so glibc's heap
held twice the blocks in use (3.2 GB of heap for 1.6 GB in use at the warm start's highest). These settings are for
runs started from Python and for ``SELFEVOLVE_MALLOC=glibc``.

**oneDNN's primitive cache** (:func:`bound_primitive_cache`) is memory kept for reuse too. On a CPU with bf16
arithmetic (the AMD EPYC measured), PyTorch runs a bf16 matrix product through oneDNN (fp32 products go to MKL in
this build), which builds a "primitive" (a kernel for the product's exact shapes) and keeps up to 1,024 of them. The
update's micro-batches have a new number of tokens almost every time, so each adds eight primitives (four shapes
forward, four backward) never used again, and the heap grows with them: bf16 products of SmolLM2-135M's four shapes
at 200 random lengths kept 1.08 GB with 1,024, 0.49 GB with 16 and 0.05 GB in fp32
(``benchmarks/bench_primitive_cache.py``). The run keeps 16: within one micro-batch the 30 layers reuse its eight,
and a short product costs what it does with 1,024, where keeping none costs about 0.4 ms a product to build it
again. In the default run with ``model.matmul_dtype=bf16_update`` the peaks fell from 4.53-4.66 to 4.09-4.12 GB
(seed 0, none or 16 kept) and from 5.26 to 4.44-4.67 GB (seed 2), with the same numbers at every step
(docs/benchmarks.md, "What the RL steps of bf16_update held"). Not applied where ``ONEDNN_PRIMITIVE_CACHE_CAPACITY``
or its older name ``DNNL_PRIMITIVE_CACHE_CAPACITY`` is set (the user's choice); without effect where oneDNN built
its cache before (it reads the variable once, at its first primitive).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 2**31 - 1  # the largest int: the heap is never trimmed
UPDATE_MMAP_THRESHOLD = 4 * 1024 * 1024  # in the update: blocks from 4 MiB up that no free chunk fits are mmapped
PRIMITIVE_CACHE = 16  # oneDNN primitives kept: one micro-batch's eight (forward and backward), twice over

_applied: bool | None = None
_mallopt = None


def keep_freed_memory() -> bool:
    """Apply the settings above once per process; whether they are in force."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def mimalloc_loaded() -> bool:
    """Whether mimalloc serves this process's ``malloc`` (the ``selfevolve`` command preloads it:
    ``selfevolve/launch.py``); glibc's settings then have nothing to set."""
    try:
        with open("/proc/self/maps") as f:
            return "libmimalloc" in f.read()
    except OSError:
        return False


def _apply() -> bool:
    if os.environ.get("SELFEVOLVE_MALLOC", "").strip().lower() == "default" or mimalloc_loaded():
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only: musl's mallopt does nothing
    except (OSError, AttributeError):
        return False
    global _mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _mallopt = mallopt
    # mallopt returns 1 on success; the mmap threshold first, so a refusal leaves the trim threshold alone
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def bound_primitive_cache() -> bool:
    """Keep at most ``PRIMITIVE_CACHE`` oneDNN primitives (see the module's text), unless the user set how many.
    Whether this set it."""
    if "ONEDNN_PRIMITIVE_CACHE_CAPACITY" in os.environ or "DNNL_PRIMITIVE_CACHE_CAPACITY" in os.environ:
        return False
    os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(PRIMITIVE_CACHE)
    return True


def release_freed_memory() -> bool:
    """Hand the heap's free pages back to the system once (glibc's ``malloc_trim``), where the settings above keep
    them: after a one-off change that frees much, such as the body's weights converted to bf16 at load
    (``models/matmul_precision.py``, 0.42 GB of fp32 weights freed for SmolLM2-135M). Whether it ran."""
    if not _applied:
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    libc.malloc_trim(0)
    return True


@contextlib.contextmanager
def heap_not_grown_by_large_blocks():
    """Within the block (the update's forwards and backwards), blocks of ``UPDATE_MMAP_THRESHOLD`` or more that no
    free chunk of the heap fits are mmapped instead of growing the heap (see the module's text). Nothing changes
    where the settings above are not in force."""
    if not _applied or _mallopt is None:
        yield
        return
    _mallopt(M_MMAP_THRESHOLD, UPDATE_MMAP_THRESHOLD)
    try:
        yield
    finally:
        _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
