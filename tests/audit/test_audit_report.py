"""The HTML report: self-contained, shows the violations and charts, renders in headless Chromium."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from audit.charts import Chart, Marker, Series, line_chart

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars",
]  # fmt: skip


def test_report_is_self_contained(planted_report: str) -> None:
    html = planted_report
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    for pattern in (r"<script", r"<link", r"<img", r"<iframe", r"\bsrc\s*=", r"\bhref\s*=", r"url\(", r"@import", r"https?://"):
        assert not re.search(pattern, html, re.I), pattern
    assert "<style>" in html


def test_report_shows_violations_lag_and_failover_charts(planted, planted_report: str) -> None:  # type: ignore[no-untyped-def]
    html = planted_report
    assert "FAIL — 2 failing queries" in html  # DLE < SLE and the stuck partition
    dle, stuck = planted.dle_victim, planted.stuck_victim
    section = html.split("<h3>dle_sle_violations")[1].split("<h3>")[0]
    assert f"<td>{dle.topic}</td><td class=\"num\">{dle.partition}</td>" in section
    section = html.split("<h3>stuck_partitions")[1].split("<h3>")[0]
    assert f"<td>{stuck.topic}</td><td class=\"num\">{stuck.partition}</td><td>PREPARING</td>" in section
    assert "synced_offsets_out_of_range" in html and "✓ none" in html
    # one lag chart per mirror, one state timeline per failover/failback episode (a-to-b has 2)
    charts = re.findall(r'<svg class="chart"[^>]*aria-label="([^"]*)"', html)
    assert sorted(c for c in charts if "lag" in c) == [
        "a-to-b: lag (source HW − destination LEO), messages",
        "c-to-b: lag (source HW − destination LEO), messages",
    ]
    assert [c for c in charts if "episode" in c] == [
        "a-to-b episode 1: partitions per state",
        "a-to-b episode 2: partitions per state",
    ]
    assert html.count("<polyline") >= 2 + 2 * 3  # lines drawn, not empty charts
    # the planted stuck partition is PREPARING with no transition to PREPARING in the history
    assert "hold a state the transition history does not explain" in html


def test_chart_scales_and_escapes() -> None:
    svg = line_chart(
        Chart("a <b> & c", [Series("s<1>", [(0, 0.0), (60_000, 40.0)])], "y", [Marker(30_000, "x&y")], step=True)
    )
    assert "a &lt;b&gt; &amp; c" in svg and "s&lt;1&gt;" in svg and "x&amp;y" in svg
    assert ">40<" in svg and "00:00:30" in svg  # y axis reaches the max; time labels in UTC
    assert "no data" in line_chart(Chart("empty", []))


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _png_distinct_rows(data: bytes, width: int) -> int:
    """How many distinct pixel rows the image has (a blank page has one or two)."""
    idat = b""
    pos = 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    bpp = data[25] == 6 and 4 or 3  # colour type 6: RGBA, 2: RGB
    stride = 1 + width * bpp
    # Filtered rows are enough to tell a drawn page from a blank one.
    return len({raw[i : i + stride] for i in range(0, len(raw), stride)})


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_report_renders_in_headless_chromium(planted_report: str, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(planted_report, encoding="utf-8")
    png = tmp_path / "report.png"
    args = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2400"]
    shot = subprocess.run([*args, f"--screenshot={png}", page.as_uri()], capture_output=True, timeout=120)
    assert shot.returncode == 0, shot.stderr.decode(errors="replace")[-2000:]
    data = png.read_bytes()
    assert _png_size(data) == (1280, 2400)
    assert _png_distinct_rows(data, 1280) > 300, "the screenshot looks blank"
    dom = subprocess.run([*args, "--dump-dom", page.as_uri()], capture_output=True, timeout=120)
    assert dom.returncode == 0
    text = dom.stdout.decode()
    assert "Cluster mirroring audit" in text and text.count("<svg") >= 4 and "FAIL" in text
