"""A headless Chromium driven by selenium, for the dashboard's browser tests.

Uses Debian's ``chromium`` and ``chromium-driver``, installed with apt-get when missing (like
ZooKeeper and Redis: see :mod:`tests.support.zkserver`). ``python -m tests.support.browser install``
installs them; :func:`chromium_or_skip` skips a test only when they cannot be installed.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support import zkserver

PACKAGES = ("chromium", "chromium-driver")
BINARIES = ("chromium", "chromedriver")
PAGE_TIMEOUT = 20.0


def missing() -> list[str]:
    return [binary for binary in BINARIES if shutil.which(binary) is None]


def ensure_chromium_installed() -> None:
    """Install Debian's chromium and chromium-driver if either is missing (apt-get update once)."""
    if not missing():
        return
    if not zkserver._apt_updated:
        zkserver._apt("update")
        zkserver._apt_updated = True
    zkserver._apt("install", "-y", *PACKAGES)
    if still := missing():
        raise RuntimeError(f"still missing after installing {' '.join(PACKAGES)}: {', '.join(still)}")


def chromium_or_skip() -> None:
    """Install the browser when missing; skip the calling test only if that is impossible."""
    import pytest

    try:
        ensure_chromium_installed()
    except (RuntimeError, OSError) as error:
        pytest.skip(f"no chromium for the browser tests and it cannot be installed: {error}")


@contextmanager
def headless_chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A selenium driver of a headless Chromium; quit (browser and driver processes) on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--no-first-run", "--disable-extensions", "--renderer-process-limit=2",
                     f"--window-size={width},{height}"):
        options.add_argument(argument)
    service = Service(executable_path=shutil.which("chromedriver") or "chromedriver", log_output=os.devnull)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        driver.set_page_load_timeout(PAGE_TIMEOUT)
        driver.set_script_timeout(PAGE_TIMEOUT)
        yield driver
    finally:
        driver.quit()


def main(argv: list[str]) -> int:
    if argv[1:] == ["install"]:
        try:
            ensure_chromium_installed()
        except (RuntimeError, OSError) as error:
            print(f"browser tests will be skipped: {error}", file=sys.stderr)
        return 0
    print("usage: python -m tests.support.browser install", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
