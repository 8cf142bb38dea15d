"""Callgrind's client requests from Python: count a phase's instructions, whatever the machine's load.

Under ``valgrind --tool=callgrind --collect-atstart=no``, :func:`counting` turns collection on for its
block and dumps the counts under the block's name (one ``callgrind.out.PID.N`` file per block, whose
``summary:`` line is the block's instructions). Outside valgrind it does nothing. The requests are C macros
(``valgrind/callgrind.h``), so a ten-line shim is compiled once with the machine's ``gcc`` and loaded with
ctypes; no Python package offers them.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SHIM = r"""
#include <valgrind/callgrind.h>
void start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT; }
void stop(const char *name) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS_AT(name); CALLGRIND_STOP_INSTRUMENTATION; }
"""

ENABLED = "JOBBOARD_CALLGRIND"
"""Set (to anything) by :mod:`benchmarks.instructions` in the environment of the runs it counts."""

_shim: ctypes.CDLL | None = None


def shim() -> ctypes.CDLL:
    """The compiled client requests (built into a temporary directory at first use)."""
    global _shim
    if _shim is None:
        build = Path(tempfile.mkdtemp(prefix="jobboard-callgrind-"))
        (build / "shim.c").write_text(SHIM)
        subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(build / "shim.so"), str(build / "shim.c")],
                       check=True)
        _shim = ctypes.CDLL(str(build / "shim.so"))
    return _shim


@contextmanager
def counting(name: str) -> Iterator[None]:
    """Count the block's instructions under ``name`` when run under callgrind (``$JOBBOARD_CALLGRIND`` set)."""
    if not os.environ.get(ENABLED):
        yield
        return
    requests = shim()
    requests.start()
    try:
        yield
    finally:
        requests.stop(name.encode())


def instructions_in(dump: Path) -> tuple[str, int]:
    """The block's name (``desc: Trigger: Client Request: NAME``) and its instructions (``summary:``/``totals:``)."""
    name, count = "", 0
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("desc: Trigger:"):
            name = line.rpartition(":")[2].strip()
        elif line.startswith(("summary:", "totals:")):
            count = int(line.split()[1])
    return name, count
