"""Headless Chromium for the browser tests (the dashboard, the API documentation pages).

``scripts/test.sh`` installs Debian's ``chromium`` when it is missing and the tests run as root; where
there is none, :data:`CHROMIUM` is None and the browser tests skip, saying so.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

__all__ = ["CHROMIUM", "OFFLINE", "chromium"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

#: Flags that take the browser off the network but for loopback: every other host name resolves to
#: nothing and every other connection goes to a closed proxy port (a CDN script would not load).
OFFLINE = ("--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", "--proxy-server=127.0.0.1:9")


def chromium(url: str, profile_root: Path, *args: str) -> str:
    """Load ``url`` in headless Chromium (8 s of virtual time for the page's requests); its stdout."""
    profile = profile_root / f"profile-{uuid.uuid4().hex}"
    assert CHROMIUM is not None
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
               "--virtual-time-budget=8000", "--window-size=1280,900", "--hide-scrollbars", *args, url]
    return subprocess.run(command, capture_output=True, timeout=120, check=True).stdout.decode()
