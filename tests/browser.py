"""A real headless browser for page tests: Debian's chromium, run as a subprocess.

Missing chromium is a failure with the fix named, never a skip (.ci/run installs it)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr", "--v=0"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("chromium is not installed: apt-get install -y --no-install-recommends chromium "
                    "(bash .ci/run installs it)")
    return found


@dataclass
class Loaded:
    dom: str
    console: list[str]  # every console message the page produced (errors, CSP violations, logs)
    screenshot: Path


def load(page: Path, workdir: Path) -> Loaded:
    """Open `page` twice (DOM dump, then a 1200x2000 screenshot) in a fresh profile."""
    binary = chromium()
    url = page.resolve().as_uri()
    console = []
    outputs = {}
    for mode, extra in (("dom", ["--dump-dom"]),
                        ("shot", [f"--screenshot={workdir / 'shot.png'}", "--window-size=1200,2000"])):
        profile = workdir / f"profile-{mode}"
        result = subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *extra, url],
                                capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stderr[-2000:]
        console += [line for line in result.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
        outputs[mode] = result.stdout
    return Loaded(outputs["dom"], console, workdir / "shot.png")


def measure(page: Path, workdir: Path, expression: str, width: int = 1200) -> str:
    """The page laid out in a `width`-pixel window, and the text `expression` (JavaScript)
    gives there. The page allows no script (its CSP), so a copy without that meta tag is
    measured; nothing else of it changes."""
    html = page.read_text(encoding="utf-8")
    csp = html.index('<meta http-equiv="Content-Security-Policy"')
    html = html[:csp] + html[html.index(">", csp) + 1:]
    copy = workdir / "measured.html"
    copy.write_text(html.replace("</body>", f'<pre id="measured"></pre><script>document.getElementById("measured")'
                                            f".textContent = String({expression});</script></body>"), encoding="utf-8")
    result = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={workdir / 'profile-measure'}",
                             f"--window-size={width},2000", "--dump-dom", copy.resolve().as_uri()],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return DomIndex(result.stdout).by_id("measured").text


class Element:
    def __init__(self, tag: str, attrs: dict):
        self.tag, self.attrs, self.text = tag, attrs, ""


class DomIndex(HTMLParser):
    """Every element with its attributes and its text content (children included)."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "wbr", "col", "area", "base", "source"}

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.elements.append(element)
        if tag not in self.VOID:
            self._open.append(element)

    def handle_endtag(self, tag):
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i].tag == tag:
                del self._open[i:]
                break

    def handle_data(self, data):
        for element in self._open:
            element.text += data

    def by_id(self, ident: str) -> Element:
        found = [e for e in self.elements if e.attrs.get("id") == ident]
        assert len(found) == 1, f"#{ident}: {len(found)} elements"
        return found[0]

    def where(self, tag: str, **attrs) -> list[Element]:
        return [e for e in self.elements if e.tag == tag
                and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]
