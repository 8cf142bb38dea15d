"""A headless Chromium driven by selenium, for the dashboard's browser tests.

Uses Debian's ``chromium`` and ``chromium-driver``, installed with apt-get when missing (like
ZooKeeper and Redis: see :mod:`tests.support.zkserver`). ``python -m tests.support.browser install``
installs them. When they cannot be installed, the browser tests fail in CI (``CI=true``, as CI
services set it), so that a broken install cannot pass unnoticed; elsewhere they are skipped, with
the reason in pytest's summary and a warning from the install step.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.localserver import apt_install

PACKAGES = ("chromium", "chromium-driver")
BINARIES = ("chromium", "chromedriver")
PAGE_TIMEOUT = 20.0


def missing() -> list[str]:
    return [binary for binary in BINARIES if shutil.which(binary) is None]


def in_ci() -> bool:
    """Whether this runs in CI: the ``CI`` variable is ``true`` (or ``1``, ``yes``)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def ensure_chromium_installed() -> None:
    """Install Debian's chromium and chromium-driver if either is missing (apt-get update once)."""
    if not missing():
        return
    apt_install(*PACKAGES)
    if still := missing():
        raise RuntimeError(f"still missing after installing {' '.join(PACKAGES)}: {', '.join(still)}")


def cannot_install(error: BaseException) -> str:
    """One line: the browser tests cannot run, the packages they need, and the first line of ``error``."""
    first = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return (f"the dashboard's browser tests cannot run: Debian's {' and '.join(PACKAGES)} are missing and "
            f"could not be installed (apt-get install {' '.join(PACKAGES)}): {first}")


def require_chromium() -> None:
    """Install the browser when missing; if that is impossible, fail the calling test in CI, skip it elsewhere."""
    import pytest

    try:
        ensure_chromium_installed()
    except (RuntimeError, OSError) as error:
        if in_ci():
            pytest.fail(cannot_install(error), pytrace=False)
        pytest.skip(f"NOT RUN (outside CI, a skip): {cannot_install(error)}")


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
    """``install``: exit 1 in CI if the browser cannot be installed, else warn (the tests will skip)."""
    if argv[1:] == ["install"]:
        try:
            ensure_chromium_installed()
        except (RuntimeError, OSError) as error:
            details = f"\n{error}" if "\n" in str(error).strip() else ""  # apt-get's output, after the one line
            if in_ci():
                print(f"error: {cannot_install(error)}{details}", file=sys.stderr)
                return 1
            print(f"WARNING: {cannot_install(error)}; they will be SKIPPED{details}", file=sys.stderr)
        return 0
    print("usage: python -m tests.support.browser install", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
