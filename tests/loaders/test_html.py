"""HTML pages keep their main content: a site's navigation, sidebars, footers and permalinks stay out.

The sceptic's page is a Sphinx page as Python's own docs ship it (related bar and sidebar with
``role="navigation"``, the body with ``role="main"``, "¶" permalinks, a footer by class), then pages of
other shapes: ``<main>`` with a header and footer around it, an ``<article>`` whose own header is its
title, a page that marks nothing, in-page links that are text and not permalinks, and a site's own rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contextkit import ingest
from contextkit.index import Index
from contextkit.loaders import HtmlLoader, HtmlRules, SourceFile, load_file, loader_for, register_loader

SPHINX = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>functools — Higher-order functions — Python 3.11 documentation</title></head>
<body>
<div class="mobile-nav"><input type="checkbox" id="menuToggler"><nav class="nav-content" role="navigation">
  <a href="https://www.python.org/">Python</a> <form role="search"><input name="q"></form></nav></div>
<div class="related" role="navigation" aria-label="Related">
  <h3>Navigation</h3><ul><li><a href="genindex.html">index</a></li><li><a href="py-modindex.html">modules</a> |</li>
  <li>Python &#187;</li><li>3.11.2 Documentation &#187;</li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper">
<div class="body" role="main">
  <section id="module-functools">
  <h1><code>functools</code> — Higher-order functions<a class="headerlink" href="#module-functools" title="Permalink to this heading">¶</a></h1>
  <p>The <code>functools</code> module is for higher-order functions: see <a href="#functools.lru_cache">lru_cache()</a>.</p>
  <dl><dt id="functools.lru_cache">@functools.lru_cache(maxsize=128)<a class="headerlink" href="#functools.lru_cache">¶</a></dt>
  <dd><p>Decorator to wrap a function with a memoizing callable that saves up to the <em>maxsize</em> most recent calls.</p>
  <div class="highlight"><pre>@lru_cache(maxsize=32)
def get_pep(num):
    ...</pre></div></dd></dl>
  </section>
</div></div></div>
<div class="sphinxsidebar" role="navigation" aria-label="main navigation"><div class="sphinxsidebarwrapper">
  <h3>Table of Contents</h3><ul><li>cache()</li><li>lru_cache()</li></ul>
  <h4>Previous topic</h4><p>itertools — Functions creating iterators</p>
  <h3>This Page</h3><ul><li>Report a Bug</li><li>Show Source</li></ul></div></div>
</div>
<div class="footer">&copy; Copyright 2001-2023, Python Software Foundation. Last updated on Mar 13, 2023.</div>
</body></html>
"""

CHROME = ("Navigation", "index", "modules", "Python »", "Table of Contents", "Previous topic", "Report a Bug",
          "Copyright", "Last updated", "¶", "Permalink")


def _load(tmp_path: Path, html: str, name: str = "page.html"):
    path = tmp_path / name
    path.write_text(html, encoding="utf-8")
    result = load_file(SourceFile(path.resolve(), name))
    assert result.errors == [] and len(result.documents) == 1
    return result.documents[0]


def test_a_sphinx_page_keeps_its_body_only(tmp_path: Path) -> None:
    doc = _load(tmp_path, SPHINX)
    assert doc.text == (
        "functools — Higher-order functions\n\n"
        "The functools module is for higher-order functions: see lru_cache().\n\n"
        "@functools.lru_cache(maxsize=128)\n\n"
        "Decorator to wrap a function with a memoizing callable that saves up to the maxsize most recent calls.\n\n"
        "@lru_cache(maxsize=32)\ndef get_pep(num):\n    ..."
    )
    for chrome in CHROME:
        assert chrome not in doc.text, chrome
    assert doc.metadata["title"].startswith("functools")


def test_a_table_of_contents_inside_the_body_is_navigation_too(tmp_path: Path) -> None:
    """Sphinx writes a page's ``toctree`` (links to other pages) inside its main content: Python's
    ``contents.html`` is nothing else, 608 chunks (2.9%) of the whole html folder, and ``library/index.html``
    and 45 other pages open with one. Its lines are headings of other pages: a search for any of them
    found the list, not the page."""
    page = SPHINX.replace("<p>The <code>functools</code>", """<div class="toctree-wrapper compound"><ul>
      <li class="toctree-l1"><a class="reference internal" href="itertools.html">itertools — Functions creating
      iterators for efficient looping</a></li><li class="toctree-l1"><a href="operator.html">operator — Standard
      operators as functions</a></li></ul></div>
      <p>The <code>functools</code>""")
    doc = _load(tmp_path, page)
    assert "itertools" not in doc.text and "operator" not in doc.text
    assert "The functools module is for higher-order functions" in doc.text


def test_main_drops_the_site_around_it_and_an_articles_header_stays(tmp_path: Path) -> None:
    page = """<html><body><header class="site"><a href="/">Acme Docs</a> <input placeholder="Search"></header>
    <nav><a href="/a">Guide</a> <a href="/b">API</a></nav>
    <p>A banner outside the content: new release out!</p>
    <main><article><header><h1>Installing Acme</h1><p>5 min read</p></header>
    <p>Run pip install acme, then acme init.</p>
    <aside class="note">Acme needs Python 3.11 or later.</aside>
    <nav class="toc"><a href="#one">On this page</a></nav></article></main>
    <aside><h2>Related</h2><p>Upgrading Acme</p></aside>
    <footer><p>&copy; 2026 Acme Inc.</p></footer></body></html>"""
    text = _load(tmp_path, page).text
    assert text == ("Installing Acme\n\n5 min read\n\nRun pip install acme, then acme init.\n\n"
                    "Acme needs Python 3.11 or later.")


def test_an_article_is_the_content_when_no_main_is_marked(tmp_path: Path) -> None:
    page = """<body><div id="sidebar"><p>Archive: 2024, 2025</p></div>
    <article><h1>Release notes</h1><p>Version 2.1 fixes 14 bugs.</p></article>
    <div class="comments"><p>Great post!</p></div></body>"""
    assert _load(tmp_path, page).text == "Release notes\n\nVersion 2.1 fixes 14 bugs."


def test_a_page_that_marks_nothing_keeps_all_but_its_chrome(tmp_path: Path) -> None:
    page = """<body><nav><a href="/">Home</a></nav><h1>Notes</h1><p>Dr. Smith paid $1,250.50 on 3 Jan.</p>
    <div role="contentinfo">Contact us</div><footer>Footer text</footer><p>Last line.</p></body>"""
    assert _load(tmp_path, page).text == "Notes\n\nDr. Smith paid $1,250.50 on 3 Jan.\n\nLast line."


@pytest.mark.parametrize("anchor, kept", [
    ('<a href="#s2">section 2</a>', "see section 2 for more"),
    ('<a href="#s2">#</a>', "see for more"),
    ('<a href="#s2" title="link">🔗</a>', "see for more"),
    ('<a class="headerlink" href="#s2">link here</a>', "see for more"),
    ('<a href="https://example.com/#s2">¶</a>', "see ¶ for more"),  # not in-page: text as any link
    ('<a href="#s2"><div>a block in a link</div></a>', "see\n\na block in a link\n\nfor more"),
])
def test_permalinks_go_and_in_page_links_with_words_stay(tmp_path: Path, anchor: str, kept: str) -> None:
    assert _load(tmp_path, f"<main><p>see {anchor} for more</p></main>").text == kept


def test_a_sites_own_rules_and_the_whole_page(tmp_path: Path) -> None:
    page = """<body><div class="crumbs">Home / Guide</div><main><p>Body text.</p>
    <div class="ad-slot">Buy now</div></main></body>"""
    builtin = loader_for(".html")
    try:
        register_loader(HtmlLoader(HtmlRules(drop_classes=frozenset({"ad-slot"}))), replace=True)
        assert _load(tmp_path, page).text == "Body text."
        register_loader(HtmlLoader(HtmlRules(whole_page=True)), replace=True)
        assert _load(tmp_path, page).text == "Home / Guide\n\nBody text.\n\nBuy now"
    finally:
        assert builtin is not None
        register_loader(builtin, replace=True)
    assert _load(tmp_path, page).text == "Body text.\n\nBuy now"


def test_an_ingested_sphinx_page_has_no_chrome_chunk(tmp_path: Path, embedder) -> None:
    docs = tmp_path / "html"
    docs.mkdir()
    (docs / "functools.html").write_text(SPHINX, encoding="utf-8")
    ingest([docs], tmp_path / "idx.ck-index", embedder=embedder)
    with Index.open(tmp_path / "idx.ck-index", read_only=True) as index:
        texts = [c.text for d in index.documents() for c in index.document_chunks(d)]
    assert texts and all(chrome not in t for t in texts for chrome in CHROME)
    assert any("lru_cache(maxsize=32)" in t for t in texts)
