"""The HTML report: self-contained, escaped, and rendered by a real headless Chromium."""

from __future__ import annotations

import html
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from assembly.assembly_samples import _sections, _text
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


# A prompt as users get it: 300 retrieved passages under a small budget (nearly all dropped), the best one
# holding a long path and a 2,000-character unbroken token, every seventh one from that long path.
LONG_PATH = "/srv/data/" + "/".join(f"directory{i}name" for i in range(40)) + "/report.md"
TOKEN = "x" * 2000
VOID = {"meta", "col", "br", "img", "input", "link", "hr", "wbr"}


def _real_assembly(n: int = 300):
    items = [EvidenceItem(id="wide", text=f"See {LONG_PATH} and {TOKEN} for FAISS.", source=LONG_PATH, score=1.0)]
    items += [EvidenceItem(id=f"doc{i}", text=_text(i), source=f"{LONG_PATH}/{i}" if i % 7 == 0 else f"src/{i}.md",
                           score=0.99 - i / (3 * n)) for i in range(n)]
    return assemble(_sections(items), 1500, fill="budget")


class _Page(HTMLParser):
    """The parsed page: each start tag and each piece of text, in document order, with its open ancestors."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.open: list[tuple[str, dict[str, str | None]]] = []
        self.tags: list[tuple[str, dict[str, str | None], tuple[str, ...]]] = []
        self.texts: list[tuple[str, tuple[str, ...]]] = []
        self.feed(page)
        self.close()

    def _path(self) -> tuple[str, ...]:
        return tuple(f"{t}.{a.get('class') or ''}".rstrip(".") for t, a in self.open)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs), self._path()))
        if tag not in VOID:
            self.open.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        while self.open and self.open.pop()[0] != tag:
            pass

    def handle_data(self, data):
        self.texts.append((data, self._path()))

    def index(self, tag: str, cls: str | None = None) -> int:
        found = [k for k, (t, a, _) in enumerate(self.tags) if t == tag and (cls is None or a.get("class") == cls)]
        assert found, f"no <{tag}{' class=' + cls if cls else ''}> in the page"
        return found[0]

    def text_in(self, ancestor: str) -> str:
        return "".join(d for d, path in self.texts if ancestor in path)

    def css(self, selector: str) -> dict[str, str]:
        """The declarations of every rule of the page's ``<style>`` whose selector list names ``selector``."""
        out: dict[str, str] = {}
        for rule in self.text_in("style").split("}"):
            if "{" not in rule:
                continue
            selectors, body = rule.split("{", 1)
            if selector in {x.strip() for x in selectors.split(",")}:
                for decl in body.split(";"):
                    if ":" in decl:
                        key, value = decl.split(":", 1)
                        out[key.strip()] = value.strip()
        return out


class TestHtmlReportOnARealPrompt:
    """Issue 31: the left-out list came before the prompt, uncapped, and long text overflowed the page."""

    def test_prompt_first_then_a_collapsed_capped_left_out_list(self):
        prompt, report = _real_assembly()
        left_out = [i for i in report.items if i.status != "included"]
        assert len(left_out) > 250 and TOKEN in prompt and LONG_PATH in prompt
        page = render_html(prompt, report)
        doc = _Page(page)
        assert doc.index("pre", "prompt") < doc.index("details") < doc.index("table", "items")
        rows = [path for t, _, path in doc.tags if t == "tr" and "table.items" in path]
        assert rows and all("details" in path for path in rows)  # the whole list is inside the collapsed box
        assert len(rows) == 1 + 50  # a header and the first 50 items
        summary = doc.text_in("summary")
        assert f"{len(left_out):,} items" in summary and "dropped (budget)" in summary
        assert f"{len(left_out) - 50:,} more" in doc.text_in("details")
        assert TOKEN in doc.text_in("pre.prompt")  # the prompt itself is whole, escaped text
        # bounded: the prompt, the header and 50 rows whatever the number left out (73,714 characters before)
        assert len(page) < len(html.escape(prompt)) + 20_000
        assert len(render_html(*_real_assembly(600))) < len(page) + 2_000

    def test_a_few_left_out_are_all_listed(self):
        prompt, report = _assembly()
        doc = _Page(render_html(prompt, report))
        left_out = [i for i in report.items if i.status != "included"]
        assert 0 < len(left_out) < 50
        assert len([t for t, _, path in doc.tags if t == "tr" and "table.items" in path]) == 1 + len(left_out)
        assert "more" not in doc.text_in("details")

    def test_untrusted_text_wraps_and_tables_stay_in_their_box(self):
        prompt, report = _real_assembly()
        doc = _Page(render_html(prompt, report))
        viewport = [a for t, a, _ in doc.tags if t == "meta" and a.get("name") == "viewport"]
        assert viewport and "width=device-width" in (viewport[0]["content"] or "")
        assert doc.css("pre.prompt")["white-space"] == "pre-wrap"
        for holder in ("body", "h1", "pre.prompt", "td", "summary"):  # the title, the prompt, ids, paths, counts
            assert doc.css(holder).get("overflow-wrap") == "anywhere", holder
        assert doc.css("table.items")["table-layout"] == "fixed" and doc.css("table.items")["width"] == "100%"
        assert doc.css(".wide")["overflow-x"] == "auto" and doc.css(".wide")["max-width"] == "100%"
        assert doc.css("svg")["max-width"] == "100%"
        tables = [path for t, _, path in doc.tags if t == "table"]
        assert len(tables) == 2 and all("div.wide" in path for path in tables)
        # a 2,000-character path in a cell is cut in its middle, not listed whole
        assert max(len(d) for d, path in doc.texts if "td" in path) <= 300

    @pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt install chromium)")
    def test_no_horizontal_overflow_at_1280px_in_headless_chromium(self, tmp_path):
        prompt, report = _real_assembly()
        page = render_html(prompt, report)
        csp = next(f'<meta http-equiv="{a["http-equiv"]}" content="{a["content"]}">' for t, a, _ in _Page(page).tags
                   if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
        assert csp in page
        probe = ("<script>document.body.setAttribute('data-width', document.documentElement.scrollWidth + ' '"
                 " + document.documentElement.clientWidth)</script></body>")  # a test-only copy may run a script
        (tmp_path / "probe.html").write_text(page.replace(csp, "").replace("</body>", probe), encoding="utf-8")
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,800", "--dump-dom",
               (tmp_path / "probe.html").as_uri()]
        dom = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout
        body = next(a for t, a, _ in _Page(dom).tags if t == "body")
        scroll, client = map(int, (body["data-width"] or "").split())
        assert 1200 < client <= 1280 and scroll <= client  # 5,575 px wide before
