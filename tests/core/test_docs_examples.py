"""Every ```python block in README.md and docs/ runs as written (each in a fresh namespace, in
an empty working directory), so the docs stay true as the code changes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
EXAMPLES = [
    pytest.param(code, id=f"{page.relative_to(REPO)}#{i}")
    for page in PAGES
    for i, code in enumerate(BLOCK.findall(page.read_text()))
]


def test_the_docs_have_examples():
    assert len(EXAMPLES) >= 17


@pytest.mark.parametrize("code", EXAMPLES)
def test_doc_example_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "<doc example>", "exec"), {"__name__": "__doc_example__"})  # noqa: S102
