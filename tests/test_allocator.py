"""glibc's malloc settings for a CPU run (``selfevolve/models/allocator.py``): applied once, skipped when the user
chose their own or opted out."""

import ctypes
import ctypes.util
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
    load_model("tiny", "fp32")
    assert called == ([1] if default_device().type == "cpu" else [])  # a model on a GPU leaves malloc alone
