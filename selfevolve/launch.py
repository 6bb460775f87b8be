"""The ``selfevolve`` command's launcher: the command runs once more, at once, with mimalloc as its allocator.

Why. PyTorch's CPU tensors come from the C library's ``malloc``. With glibc's, at the warm start's highest (seed 2,
``model.matmul_dtype=bf16_update``) the heap held 3.24 GB while the blocks in use were 1.57 GB (fp32: 3.04 and 1.34;
the blocks in use never passed 1.9 GB in any phase): micro-batches of ever different lengths leave free chunks that
the next one's blocks do not fit, so the heap grows beside them (``mallinfo2``, read every 20 ms; docs/benchmarks.md,
"The heap, not the tensors"). mimalloc (Microsoft's allocator, here from the ``cmeel-mimalloc`` wheel) sorts blocks
into size classes and pages of their own. Side by side (one thread each), the warm start's steps of that run peaked
at 2.64-2.68 GB against 4.05-4.24 GB and took 22.4-25.7 s against 26.9-30.7 s; the default run (fp32, seed 0) peaked
at 2.97 against 3.76 GB in 0.968x the time.

An allocator has to be in place before the process allocates anything, so Python cannot switch to it: the
launcher sets ``LD_PRELOAD`` and executes the same command again, before torch is imported; a variable
(:data:`MARK`) stops it from doing so twice. ``MIMALLOC_PURGE_DELAY=-1`` keeps freed memory for reuse, as
``models/allocator.py`` does for glibc: with mimalloc's default (freed pages handed back after 10 ms) the same steps
took 30.0-32.5 s against glibc's 27.1-29.6 s, presumably faulting the pages in again.

``SELFEVOLVE_MALLOC`` chooses: unset (mimalloc where it is installed, else glibc with ``models/allocator.py``'s
settings), ``glibc`` (those settings, no mimalloc) or ``default`` (glibc as it comes). Nothing is changed where
``LD_PRELOAD`` is already set (the user's allocator or profiler), off Linux, or where the wheel is missing. Runs
started from Python (``Trainer(cfg).train()``, the tests, ``python -m selfevolve.cli``) keep glibc; to give them
mimalloc, start Python with ``LD_PRELOAD=$(python -m selfevolve.launch)`` (run as a script, this module prints the
library's path). The allocator changes where numbers live, not what is computed: every metric and trajectory of
the default run (fp32, one thread) was identical with either.
"""

from __future__ import annotations

import os
import sys

MARK = "SELFEVOLVE_MIMALLOC"  # set in the re-executed process: mimalloc is preloaded there
MODES = ("", "glibc", "default")  # SELFEVOLVE_MALLOC's values


def malloc_mode(environ=os.environ) -> str:
    """``SELFEVOLVE_MALLOC``'s value, checked: one of :data:`MODES` ('' when unset)."""
    raw = environ.get("SELFEVOLVE_MALLOC", "")
    value = raw.strip().lower()
    if value not in MODES:
        raise ValueError(f"SELFEVOLVE_MALLOC={raw!r} is not one of 'glibc', 'default' or unset (unset: mimalloc "
                         f"where it is installed; 'glibc': glibc, freed memory kept; 'default': glibc as it comes)")
    return value


def library() -> str | None:
    """The path of ``libmimalloc.so`` from the ``cmeel-mimalloc`` wheel, or None where it is not installed."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("cmeel-mimalloc")
    except PackageNotFoundError:
        return None
    for f in dist.files or []:
        if f.name == "libmimalloc.so":
            path = str(dist.locate_file(f))
            return path if os.path.exists(path) else None
    return None


def preload_env(environ=os.environ) -> dict[str, str] | None:
    """The environment to execute the command again with (mimalloc preloaded), or None to run it as it is."""
    if malloc_mode(environ):  # glibc, or glibc as it comes (checked first: a wrong value is an error everywhere)
        return None
    if environ.get(MARK) or environ.get("LD_PRELOAD") or not sys.platform.startswith("linux"):
        return None
    lib = library()
    if lib is None:
        return None
    return {**environ, "LD_PRELOAD": lib, "MIMALLOC_PURGE_DELAY": environ.get("MIMALLOC_PURGE_DELAY", "-1"),
            MARK: "1"}


def main() -> None:
    """The ``selfevolve`` command: once more with mimalloc (see above), then the command line itself."""
    try:
        env = preload_env()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if env is not None:
        try:
            os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
        except OSError:
            pass  # could not execute: run as it is, with glibc
    if os.environ.pop(MARK, None):
        # in force here; the processes this one starts (a JVM, git, Ray's workers) are not given it, and a
        # selfevolve command among them (a sweep's runs: python -m selfevolve) preloads it for itself
        os.environ.pop("LD_PRELOAD", None)
    from selfevolve.cli import main as command_line

    command_line()


if __name__ == "__main__":
    print(library() or "")
