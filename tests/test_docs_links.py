"""Every relative markdown link in the user docs points to a file that exists and, where it names an
anchor, to a heading (or an explicit `<a id=...>`) of that file: a section that moves breaks no link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "ARCHITECTURE.md", *(REPO / "docs").glob("*.md")])

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` in a shell block is no heading)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation but '-' and '_' dropped, spaces -> '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for line in prose_lines(path.read_text()):
        found.update(EXPLICIT_ANCHOR.findall(line))
        if m := HEADING.match(line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")  # GitHub numbers repeated headings
    return found


def links(path: Path) -> list[str]:
    """Relative link targets of a file (web and mail links are not checked here)."""
    out = []
    for line in prose_lines(path.read_text()):
        for target in LINK.findall(line):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                out.append(target)
    return out


def shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no file {shown(dest)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {shown(dest)}")
    return broken


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path):
    broken = broken_links(path)
    assert not broken, f"{shown(path)} has broken links: {broken}"


def test_slug_is_githubs():
    assert slug("Who sets the split: manual, schedule, demand") == "who-sets-the-split-manual-schedule-demand"
    assert slug("The plan at a time: plan --at") == "the-plan-at-a-time-plan---at"
    assert slug("Alerts (PrometheusRule, `metrics.prometheusRule.enabled=true`)") == (
        "alerts-prometheusrule-metricsprometheusruleenabledtrue"
    )


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#a-section) [self](#page) [gone](missing.md) [moved](other.md#no-such)\n"
        "```sh\n# not a heading\n```\n[code heading](#not-a-heading) [web](https://example.com/x.md)\n"
    )
    assert sorted(b.split(":")[0] for b in broken_links(page)) == ["#not-a-heading", "missing.md", "other.md#no-such"]
