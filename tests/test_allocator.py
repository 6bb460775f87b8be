"""glibc's malloc settings and oneDNN's primitive cache for a CPU run (``selfevolve/models/allocator.py``): applied
once, skipped when the user chose their own or opted out."""

import ctypes
import ctypes.util
import os
import sys

import pytest

from selfevolve.models import allocator


def glibc() -> bool:
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").gnu_get_libc_version
        return sys.platform.startswith("linux")
    except (OSError, AttributeError):
        return False


def test_applied_where_the_c_library_is_glibc_and_once(monkeypatch):
    monkeypatch.delenv("SELFEVOLVE_MALLOC", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    assert allocator._apply() is glibc()
    monkeypatch.setattr(allocator, "_applied", None)
    calls = []
    monkeypatch.setattr(allocator, "_apply", lambda: calls.append(1) or True)
    assert allocator.keep_freed_memory() and allocator.keep_freed_memory() and calls == [1]


@pytest.mark.parametrize("name, value", [("SELFEVOLVE_MALLOC", "default"), ("MALLOC_MMAP_THRESHOLD_", "65536"),
                                         ("MALLOC_TRIM_THRESHOLD_", "0")])
def test_left_alone_when_the_user_chose(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    assert allocator._apply() is False


def test_loading_a_model_applies_them_on_the_cpu_only(monkeypatch):
    from selfevolve.models.loading import default_device, load_model

    called = []
    monkeypatch.setattr("selfevolve.models.loading.keep_freed_memory", lambda: called.append(1) or True)
    unset_primitive_cache(monkeypatch)
    load_model("tiny", "fp32")
    cpu = default_device().type == "cpu"
    assert called == ([1] if cpu else [])  # a model on a GPU leaves malloc alone
    # and oneDNN's primitive cache: 16 kept
    assert os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == ("16" if cpu else None)


def unset_primitive_cache(monkeypatch):
    """Neither name of oneDNN's variable set, and whatever the test sets undone after it (a delenv of an unset
    variable records nothing to restore, so set it first)."""
    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_primitive_cache_bounded_unless_the_user_chose(monkeypatch):
    unset_primitive_cache(monkeypatch)
    assert allocator.bound_primitive_cache() and os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "1024")
    assert not allocator.bound_primitive_cache() and os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "1024"
    unset_primitive_cache(monkeypatch)
    monkeypatch.setenv("DNNL_PRIMITIVE_CACHE_CAPACITY", "64")  # the older name, which oneDNN reads too
    assert not allocator.bound_primitive_cache() and "ONEDNN_PRIMITIVE_CACHE_CAPACITY" not in os.environ


@pytest.mark.skipif(not glibc(), reason="malloc_trim is glibc's")
def test_release_hands_freed_heap_pages_back():
    """200 fp32 blocks of 576 x 1536 (3.5 MB each, under the 32 MiB threshold: from the heap) converted to bf16, as
    the body's weights are at load: the 0.71 GB of fp32 freed stays resident in a heap that is never trimmed, and
    one release hands at least most of it back."""
    import torch

    if not allocator.keep_freed_memory():
        pytest.skip("the malloc settings are not in force (SELFEVOLVE_MALLOC=default, or the user's own)")

    def rss_gb() -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1e6

    blocks = [torch.randn(576, 1536) for _ in range(200)]
    blocks = [b.bfloat16() for b in blocks]  # the fp32 blocks freed into the heap
    before = rss_gb()
    assert allocator.release_freed_memory()
    assert before - rss_gb() > 0.5  # of 200 * 576 * 1536 * 4 B = 0.71 GB
    del blocks
