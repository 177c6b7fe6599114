"""Every example in README.md and docs/*.md runs, against a real mockllm server (issue 29).

One test per page (pages found by glob, so a page added later is tested too): its examples run
in order, in a temp folder of its own holding a copy of the bundled recordings, with a mockllm
server of those recordings and the scripted stand-in provider on free loopback ports. How each
kind of block is run: tests/docs_examples.py, and docs/architecture.md for contributors.
A page is one test, not one per block, because a page's blocks build on each other (one
namespace, one folder); pages run in parallel under xdist, each in its own folder and ports.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import mockllm
from tests.docs_examples import (
    LANGUAGES,
    ROOT,
    Place,
    bin_folder,
    copy_recordings,
    evaluate,
    example_env,
    fence_languages,
    pages,
)
from tests.scripted_upstream import ScriptedUpstream

PAGES = pages()


def _id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Place]:
    folder = tmp_path / "work"
    folder.mkdir()
    recordings = copy_recordings(folder)
    monkeypatch.chdir(folder)
    for name in ("CI", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-example")
    with ScriptedUpstream() as upstream, mockllm.Server(recordings) as server:
        port = int(server.url.rsplit(":", 1)[1])
        yield Place(folder, server.url, upstream.url, example_env(bin_folder(tmp_path / "bin"), port))


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_example_on_the_page_runs(page: Path, place: Place) -> None:
    # Examples are written as users write code: a client made in an example is not always closed.
    # Its socket is collected here, warnings about it ignored, not during some later test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        namespace = evaluate(page, place)
        namespace.clear()
        gc.collect()


def test_pages_are_found_by_glob_and_hold_examples_that_run() -> None:
    names = {_id(p) for p in PAGES}
    assert {"README.md", "docs/pytest.md", "docs/format.md", "docs/architecture.md"} <= names
    # The pages that carry the quick starts really hold runnable blocks (a harness that ran
    # nothing would pass every page).
    for name in ("README.md", "docs/pytest.md", "docs/python-api.md", "docs/record.md"):
        languages = [language for _, language in fence_languages(ROOT / name)]
        assert "python" in languages or "bash" in languages, name


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_fence_names_a_known_language(page: Path) -> None:
    """```py or a bare ``` would be shown and silently never run: each fence says what it is."""
    unknown = [(line, language) for line, language in fence_languages(page) if language not in LANGUAGES]
    assert not unknown, f"{_id(page)}: fences with no or an unknown language (line, language): {unknown}; " \
                        f"use one of {', '.join(LANGUAGES)} (see docs/architecture.md)"
