"""The ``selfevolve`` command's launcher (``selfevolve/launch.py``): the command executed once more with mimalloc
preloaded, unless the user chose otherwise."""

import platform
import subprocess
import sys

import pytest

from selfevolve import launch

LINUX_X86 = sys.platform.startswith("linux") and platform.machine() == "x86_64"  # where pyproject installs it


@pytest.mark.skipif(not LINUX_X86, reason="cmeel-mimalloc is a dependency on Linux x86-64 only")
def test_the_wheel_is_installed_and_found():
    path = launch.library()
    assert path and path.endswith("libmimalloc.so")


@pytest.mark.skipif(not LINUX_X86, reason="cmeel-mimalloc is a dependency on Linux x86-64 only")
def test_preloads_mimalloc_and_keeps_freed_memory_unless_told_otherwise():
    env = launch.preload_env({"PATH": "/bin"})
    assert env == {"PATH": "/bin", "LD_PRELOAD": launch.library(), "MIMALLOC_PURGE_DELAY": "-1", launch.MARK: "1"}
    # the user's purge delay is theirs
    assert launch.preload_env({"MIMALLOC_PURGE_DELAY": "10"})["MIMALLOC_PURGE_DELAY"] == "10"
    # already done, the user's own preload, glibc chosen (with the run's settings or as it comes)
    for environ in ({launch.MARK: "1"}, {"LD_PRELOAD": "/usr/lib/libtcmalloc.so"}, {"SELFEVOLVE_MALLOC": "glibc"},
                    {"SELFEVOLVE_MALLOC": " Default"}):
        assert launch.preload_env(environ) is None


def test_a_wrong_choice_names_the_allowed_ones():
    # checked before anything else, so a preload of the user's own (or another platform) does not hide it
    for environ in ({"SELFEVOLVE_MALLOC": "JeMalloc"}, {"SELFEVOLVE_MALLOC": "JeMalloc", "LD_PRELOAD": "/x.so"}):
        with pytest.raises(ValueError, match=r"SELFEVOLVE_MALLOC='JeMalloc' is not one of 'glibc', 'default' or unset"):
            launch.preload_env(environ)
    out = subprocess.run([sys.executable, "-m", "selfevolve", "--help"], capture_output=True, text=True,
                         env={"SELFEVOLVE_MALLOC": "jemalloc", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2 and out.stderr.startswith("error: SELFEVOLVE_MALLOC='jemalloc' is not one of")


@pytest.mark.skipif(not LINUX_X86, reason="cmeel-mimalloc is a dependency on Linux x86-64 only")
def test_the_command_runs_once_more_with_mimalloc_mapped_then_drops_the_preload_from_its_environment():
    """The same command line runs again, once, with libmimalloc in the process's memory map; the re-executed
    process takes the preload out of its environment (the processes it starts inherit none) and glibc's settings
    (``models/allocator.py``) stand aside."""
    code = ("import os; print('mimalloc' in open('/proc/self/maps').read(), flush=True); "
            "from selfevolve.launch import main; import selfevolve.cli as cli; "
            "cli.main = lambda: print(os.environ.get('LD_PRELOAD'), __import__('selfevolve.models.allocator', "
            "fromlist=['x'])._apply(), flush=True); main()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "None", "False"]
