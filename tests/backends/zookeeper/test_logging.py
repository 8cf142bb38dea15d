"""aiozk's reconnect tracebacks stay out of a program's logs unless it asks for them."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import logging
{before}
import jobboard_zookeeper
print(logging.getLogger("aiozk").level)
"""


def aiozk_level_after_import(before: str = "") -> int:
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(before=before)], capture_output=True, text=True,
                          timeout=60, check=True)
    return int(done.stdout)


def test_importing_the_backend_quiets_aiozk() -> None:
    assert aiozk_level_after_import() == 50  # CRITICAL


def test_a_level_the_program_chose_is_kept() -> None:
    assert aiozk_level_after_import('logging.getLogger("aiozk").setLevel(logging.DEBUG)') == 10
