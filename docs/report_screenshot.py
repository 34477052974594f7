"""Render a run's report.html to a PNG with headless Chromium (Debian's `chromium` package), e.g. for
docs/report.png:

    python docs/report_screenshot.py STATE/reports/RUN_ID/report.html docs/report.png [--width 1200 --height 2000]

The page is self-contained (plots inlined), so Chromium needs no network. Exit 2 with one line when no
browser is installed or the page is missing."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def browser() -> str | None:
    """The headless browser to use: $CHROMIUM, else the first of BROWSERS on PATH."""
    return os.environ.get("CHROMIUM") or next((p for p in map(shutil.which, BROWSERS) if p), None)


def chromium_args(exe: str, profile: str) -> list[str]:
    # --no-sandbox: root in a container has no user namespace for Chromium's sandbox; the page is our own file
    return [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--allow-file-access-from-files", f"--user-data-dir={profile}"]


def screenshot(html: Path, png: Path, width: int = 1200, height: int = 2000, timeout_s: float = 90.0) -> Path:
    exe = browser()
    if exe is None:
        raise FileNotFoundError("no chromium on PATH (apt-get install chromium), or set $CHROMIUM")
    html = Path(html).resolve()
    if not html.is_file():
        raise FileNotFoundError(f"{html} is not a file")
    png = Path(png).resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="marathon-chromium-") as profile:
        subprocess.run(chromium_args(exe, profile) + [f"--screenshot={png}", f"--window-size={width},{height}",
                                                      html.as_uri()],
                       check=True, capture_output=True, timeout=timeout_s)
    if not png.is_file():
        raise RuntimeError(f"chromium wrote no {png}")
    return png


def dump_dom(html: Path, timeout_s: float = 90.0) -> str:
    """The page's DOM after Chromium loaded it (images decoded, scripts run)."""
    exe = browser()
    if exe is None:
        raise FileNotFoundError("no chromium on PATH (apt-get install chromium), or set $CHROMIUM")
    with tempfile.TemporaryDirectory(prefix="marathon-chromium-") as profile:
        out = subprocess.run(chromium_args(exe, profile) + ["--dump-dom", Path(html).resolve().as_uri()],
                             check=True, capture_output=True, text=True, timeout=timeout_s)
    return out.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="report.html to a PNG with headless Chromium")
    ap.add_argument("html", type=Path)
    ap.add_argument("png", type=Path)
    ap.add_argument("--width", type=int, default=1200)
    ap.add_argument("--height", type=int, default=2000)
    args = ap.parse_args(argv)
    try:
        print(screenshot(args.html, args.png, args.width, args.height))
    except (FileNotFoundError, RuntimeError, subprocess.SubprocessError) as exc:
        print(f"report_screenshot: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
