"""Child processes for fault tests: started, and ready before the test goes on."""

from __future__ import annotations

import asyncio
import sys


async def spawn_ready(module: str, *args: str) -> asyncio.subprocess.Process:
    """Run ``python -m module args...`` and wait for the ``ready`` line it prints."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args, stdout=asyncio.subprocess.PIPE)
    assert child.stdout is not None
    assert (await child.stdout.readline()).strip() == b"ready"
    return child
