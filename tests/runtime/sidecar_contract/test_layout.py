"""check_layout: the one rule for a deployment's file layout (the hub
refuses, the sidecar never writes, what it refuses)."""

from __future__ import annotations

import pytest

from runtime import InvalidSources, check_layout
from runtime.sidecar_contract._layout import MAX_SOURCE_BYTES


def test_the_whole_size_is_bounded_by_bytes_not_characters() -> None:
    check_layout({"flow.py": "x" * MAX_SOURCE_BYTES})
    with pytest.raises(InvalidSources, match="more than"):
        check_layout({"flow.py": "x" * MAX_SOURCE_BYTES, "b.py": "y"})
    with pytest.raises(InvalidSources, match="more than"):
        check_layout({"flow.py": "\u00e9" * (MAX_SOURCE_BYTES // 2 + 1)})


@pytest.mark.parametrize(
    "files",
    [
        {"a/b": "", "a/b/c/d.py": ""},
        {"a/b/c/d.py": "", "a/b/c": ""},
        {"x.py": "", "x.py/y/z.py": ""},
    ],
)
def test_a_file_that_is_also_a_directory_at_any_depth(files: dict[str, str]) -> None:
    with pytest.raises(InvalidSources, match="both a file and a directory"):
        check_layout(files)


def test_text_that_utf8_cannot_hold_is_refused() -> None:
    with pytest.raises(InvalidSources, match="not valid UTF-8"):
        check_layout({"flow.py": "\ud800"})
    with pytest.raises(InvalidSources, match="not valid UTF-8"):
        check_layout({"\udcff.py": ""})


def test_siblings_and_prefixes_of_names_are_no_clash() -> None:
    check_layout({"a/b.py": "", "a/bc.py": "", "ab/c.py": "", "a.py": "", "a/b/c.py": ""})
