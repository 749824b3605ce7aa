"""docs/testing-workflows.md's example, run: its workflow and its test, as
an author would lay them out (``flow.py`` beside ``test_flow.py``)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).parents[3] / "docs" / "testing-workflows.md"

pytestmark = pytest.mark.anyio


async def test_the_page_s_example_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flow, test = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)[:2]
    (tmp_path / "flow.py").write_text(flow, encoding="utf-8")
    (tmp_path / "test_flow.py").write_text(test, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("test_flow")
        tests = [getattr(module, n) for n in dir(module) if n.startswith("test_")]
        assert len(tests) == 2
        for case in tests:
            await case()
    finally:
        for name in ("flow", "test_flow"):
            sys.modules.pop(name, None)
