"""The reference site builds clean, and every link in the README and the pages resolves (issue 29).

`mkdocs build --strict` fails on a page missing from the nav, a broken link between pages or an
anchor that no heading makes; it runs in-process (no subprocess start-up), into a temp folder.
The link check covers what mkdocs does not see: the README, which is outside the site and links
into docs/, and links from the pages to files of the repository that are not pages.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import markdown
import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config

from tests.docs_examples import ROOT, pages

PAGES = pages()


def test_the_site_builds_with_strict(tmp_path: Path) -> None:
    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(tmp_path / "site"), strict=True)
    build(config)
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "format" / "index.html").is_file()
    # Search is built: the Material theme's index of every page.
    assert (tmp_path / "site" / "search" / "search_index.json").is_file()


def test_every_page_in_docs_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if f": {p.name}" not in nav]
    assert not missing, f"add these pages to mkdocs.yml's nav: {missing}"


class _Targets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"a": "href", "img": "src"}.get(tag)
        self.found += [value for name, value in attrs if name == wanted and value is not None]


def _links(page: Path) -> list[str]:
    """Every link and image target in a page, as Python-Markdown (mkdocs' parser) reads it: links
    written inside code are not links."""
    targets = _Targets()
    targets.feed(markdown.markdown(page.read_text(encoding="utf-8"), extensions=["fenced_code", "tables"]))
    return targets.found


def _anchors(page: Path) -> set[str]:
    """The ids mkdocs gives a page's headings (its toc slug: lowercase, words joined by dashes)."""
    slugs = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") and not line.startswith("#!"):
            text = re.sub(r"[`*_]", "", line.lstrip("#").strip()).lower()
            slugs.add(re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", text)).strip("-"))
    return slugs


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves_inside_the_repository(page: Path) -> None:
    broken = []
    for href in _links(page):
        parts = urlsplit(href)
        if parts.scheme or href.startswith("//"):
            continue  # the web: not this check's business
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not target.is_relative_to(ROOT) or not target.exists():
            broken.append(f"{href} (no {target})")
        elif parts.fragment and target.suffix == ".md" and parts.fragment not in _anchors(target):
            broken.append(f"{href} (no heading makes #{parts.fragment})")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_the_readme_needs_nothing_outside_the_repository() -> None:
    text = (ROOT / "README.md").read_text()
    assert "../shared" not in text and "DESIGN.md" not in text
    for page in PAGES:
        assert "../shared" not in page.read_text(), page


def test_the_readme_starts_with_the_two_set_up_commands_and_stays_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert [line.strip() for line in lines[:2]] == ["pip install -e . && mockllm serve",
                                                    "pip install -e '.[test]' && python3 -m pytest"]
    assert len(lines) <= 152, "the front page is a front page: move the detail into docs/"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -e '.[test]' && python3 -m pytest" in ci


def test_every_flag_of_every_verb_is_on_the_cli_page() -> None:
    """The CLI page is where options are looked up: a flag added to a verb is documented there too."""
    from mockllm.cli.main import _parser

    page = (ROOT / "docs" / "cli.md").read_text()
    verbs = next(a for a in _parser()._actions if a.dest == "verb")

    def documented(flag: str) -> bool:
        return flag == "--help" or f"`{flag}" in page or f"{flag} " in page

    missing = {name: [flag for action in verb._actions for flag in action.option_strings
                      if flag.startswith("--") and not documented(flag)]
               for name, verb in verbs.choices.items()}  # type: ignore[union-attr]
    assert not any(missing.values()), f"document these flags in docs/cli.md: {missing}"
