"""Headless Debian Chromium for the browser tests (never a browser downloaded by Playwright)."""

from __future__ import annotations

import shutil
import struct

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Offline and quiet: no update checks, no background fetches that would show up as requests.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch(playwright):
    """Chromium under Playwright; fails (never skips) when Debian's chromium is missing."""
    if CHROMIUM is None:
        pytest.fail(
            "Debian's chromium is not installed (apt install chromium); "
            "deselect the browser tests with -m 'not browser'"
        )
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height
