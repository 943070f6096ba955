"""Headless Chromium for the report tests: a screenshot of a page, and the page's DOM after load with the state of
every image recorded by a script added to a copy of the page (the report itself carries no script)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

BINARIES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
IMAGE_PROBE = """<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  document.body.setAttribute('data-images', String(imgs.length));
  document.body.setAttribute('data-images-loaded',
    String(imgs.filter(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0).length));
});
</script>
"""


def chromium() -> str:
    """The browser's path; on CI (CI=true) a missing browser fails the test, elsewhere it skips it."""
    for name in BINARIES:
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI") == "true":
        pytest.fail("no Chromium on this CI machine: .ci/run installs Debian's chromium package; see its log")
    pytest.skip("no Chromium here (Debian: apt-get install chromium)")


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--hide-scrollbars", "--no-first-run", f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


def screenshot(page: Path, shot: Path, *, width: int = 1200, height: int = 2400) -> Path:
    done = _run([f"--window-size={width},{height}", f"--screenshot={shot}", page.resolve().as_uri()],
                shot.parent / "chromium-profile-shot")
    assert shot.is_file(), f"no screenshot: rc {done.returncode}\n{done.stderr[-2000:]}"
    return shot


def loaded_dom(page: Path) -> tuple[str, int, int]:
    """(DOM text after load, images on the page, images that loaded)."""
    probe = page.with_name(page.stem + ".probe.html")
    html = page.read_text(encoding="utf-8")
    probe.write_text(html.replace("</body>", IMAGE_PROBE + "</body>"), encoding="utf-8")
    done = _run(["--virtual-time-budget=15000", "--dump-dom", probe.resolve().as_uri()],
                page.parent / "chromium-profile-dom")
    dom = done.stdout
    total = re.search(r'data-images="(\d+)"', dom)
    loaded = re.search(r'data-images-loaded="(\d+)"', dom)
    assert total and loaded, f"the probe did not run: rc {done.returncode}\n{done.stderr[-2000:]}\n{dom[:500]}"
    return dom, int(total.group(1)), int(loaded.group(1))
