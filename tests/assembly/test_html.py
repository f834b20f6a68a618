"""The HTML report: self-contained, escaped, and rendered by a real headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from contextkit.assembly import EvidenceItem, Section, assemble
from contextkit.assembly.html import render_html, write_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _assembly():
    items = [EvidenceItem(id=f"d{i}", text=f"Passage {i}. " * 40 + "<script>alert(1)</script>", score=1 - i / 10,
                          source=f"docs/{i}.md") for i in range(8)]
    sections = [Section("instructions", role="key_instructions", content="Answer from the evidence."),
                Section("evidence", role="evidence", items=items),
                Section("question", role="question", content="What is in passage 3?")]
    return assemble(sections, 900)


class TestHtmlReport:
    def test_self_contained_and_escaped(self):
        prompt, report = _assembly()
        page = render_html(prompt, report)
        assert "<script" not in page.replace("&lt;script", "")  # document text cannot run in the page
        assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "src=" not in page
        for s in report.sections:
            assert f"{s.tokens:,} tokens" in page
        assert any(i.status == "dropped" for i in report.items) and "budget" in page

    @pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt install chromium)")
    def test_renders_in_headless_chromium(self, tmp_path):
        pytest.importorskip("PIL")
        from PIL import Image, ImageStat

        prompt, report = _assembly()
        page = write_html(tmp_path / "report.html", prompt, report)
        shot = tmp_path / "shot.png"
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,1600", f"--screenshot={shot}",
               Path(page).as_uri()]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
        image = Image.open(shot).convert("RGB")
        assert image.size == (1200, 1600)
        spread = ImageStat.Stat(image).stddev
        assert max(spread) > 20  # not a blank page: text, the coloured budget bar, tables
        colours = image.getcolors(maxcolors=1 << 20) or []
        assert len(colours) > 50
