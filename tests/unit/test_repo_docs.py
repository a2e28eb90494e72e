"""The repository's own markdown (README, ARCHITECTURE, CONTRIBUTING, CHANGELOG) links only to files that
exist; the docs site's strict build (``make docs``) checks the pages under docs/ the same way."""

from __future__ import annotations

import re
from typing import Final

import pytest

from tests.support.docs_pages import REPO_ROOT

ROOT_PAGES: Final = ("README.md", "ARCHITECTURE.md", "CONTRIBUTING.md", "CHANGELOG.md")
_LINK: Final = re.compile(r"\]\((?P<target>[^)\s]+)\)")


@pytest.mark.parametrize("page", ROOT_PAGES)
def test_relative_links_reach_a_file(page: str) -> None:
    text = (REPO_ROOT / page).read_text(encoding="utf-8")
    targets = [match["target"] for match in _LINK.finditer(text)]
    local = [target.split("#", 1)[0] for target in targets if not re.match(r"[a-z]+:|#", target)]
    missing = [target for target in local if not (REPO_ROOT / target).exists()]
    assert missing == []


def test_the_readme_stays_a_landing_page() -> None:
    """What tally is, the two commands, a tour and links: the rest belongs to the docs site."""
    lines = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    assert lines[3].startswith("make demo"), "the two commands open the README"
    assert lines[4].startswith("make test"), "the two commands open the README"
