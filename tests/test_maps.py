"""The code maps of docs/ (tests/support/maps.py): current, and made from the code; and every
bench script the docs and the code cite is where they say."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

import runtime.wire
from tests.support import REPO
from tests.support.maps import (
    COMMAND,
    MapError,
    first_sentence,
    main,
    render_frames,
    stale,
    write,
)


def test_the_maps_in_docs_are_the_code_s() -> None:
    diffs = stale(REPO)
    assert not diffs, (
        "a map in docs/ differs from the code (a module or frame added, moved or"
        f" re-described): run {COMMAND} and commit the result\n\n" + "\n".join(diffs.values())
    )


def _package(root: Path, folder: str, doc: str) -> None:
    (root / folder).mkdir(parents=True)
    (root / folder / "__init__.py").write_text(f'"""{doc}"""\n')


def _tree_doc(root: Path) -> Path:
    (root / "docs").mkdir()
    doc = root / "docs" / "map.md"
    doc.write_text(
        "# Map\n\nProse before.\n\n<!-- begin map: tree app -->\nold\n<!-- end map -->\n\n"
        "Prose after.\n\n<!-- begin map: modules app/room -->\n<!-- end map -->\n"
    )
    return doc


def test_a_module_added_makes_the_map_stale_until_it_is_written(tmp_path: Path) -> None:
    _package(tmp_path, "app", "The app. More about it.")
    _package(tmp_path, "app/room", "A room of the app, e.g. for tests.")
    (tmp_path / "app" / "one.py").write_text('"""The first module.\n\nDetails."""\n')
    doc = _tree_doc(tmp_path)

    assert write(tmp_path) == [doc]
    text = doc.read_text()
    assert text.startswith("# Map\n\nProse before.\n\n") and "\nProse after.\n" in text
    assert "app/  The app\n  one.py  The first module\n  room/   A room of the app, e.g. for" in (
        text
    )
    assert "| `app/room/` | A room of the app, e.g. for tests |" in text
    assert stale(tmp_path) == {}

    (tmp_path / "app" / "room" / "two.py").write_text('"""The second module, in the room."""\n')
    diffs = stale(tmp_path)
    assert list(diffs) == [doc]
    assert "+    two.py  The second module, in the room" in diffs[doc]
    assert "+| `app/room/two.py` | The second module, in the room |" in diffs[doc]
    assert doc.read_text() == text  # a check writes nothing

    write(tmp_path)
    assert stale(tmp_path) == {}


def test_a_module_moved_to_a_sub_folder_moves_in_the_map(tmp_path: Path) -> None:
    _package(tmp_path, "app", "The app.")
    _package(tmp_path, "app/room", "A room.")
    (tmp_path / "app" / "one.py").write_text('"""The first module."""\n')
    doc = _tree_doc(tmp_path)
    write(tmp_path)
    (tmp_path / "app" / "one.py").rename(tmp_path / "app" / "room" / "one.py")

    write(tmp_path)
    assert "  room/  A room\n    one.py  The first module\n" in doc.read_text()
    assert "| `app/room/one.py` | The first module |" in doc.read_text()


def test_a_module_without_a_docstring_is_an_error_naming_it(tmp_path: Path) -> None:
    _package(tmp_path, "app", "The app.")
    _package(tmp_path, "app/room", "A room.")
    (tmp_path / "app" / "bare.py").write_text("X = 1\n")
    _tree_doc(tmp_path)
    with pytest.raises(MapError, match=r"docs/map.md:5: app/bare.py has no module docstring"):
        stale(tmp_path)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- begin map: tree gone -->\n<!-- end map -->\n", "gone is named by a map but is not"),
        ("<!-- begin map: tree app -->\nno end\n", "a map without its"),
        ("<!-- begin map: sketch app -->\n<!-- end map -->\n", "no map of kind 'sketch'"),
        ("<!-- end map -->\n", "a map marker out of place"),
        ("<!-- begin map: modules a b -->\n<!-- end map -->\n", "a modules map names one folder"),
    ],
)
def test_a_bad_marker_is_an_error(tmp_path: Path, text: str, error: str) -> None:
    _package(tmp_path, "app", "The app.")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text(text)
    with pytest.raises(MapError, match=error):
        stale(tmp_path)


@pytest.mark.parametrize(
    ("doc", "sentence"),
    [
        ("One thing.", "One thing"),
        ("One thing: ``a.b``, e.g. ``c``. Then more.", "One thing: `a.b`, e.g. `c`"),
        ("Wrapped\nover lines. Second.\n\nNext paragraph.", "Wrapped over lines"),
        ("The :class:`~runtime.Transport` seam", "The `Transport` seam"),
        ("Why not? Because.", "Why not?"),
    ],
)
def test_first_sentence(doc: str, sentence: str) -> None:
    assert first_sentence(doc) == sentence


def test_the_frames_map_has_every_frame_and_event_with_its_tag() -> None:
    table = render_frames(REPO, [])
    classes = typing.get_args(runtime.wire.Frame) + typing.get_args(runtime.wire.Event)
    for cls in classes:
        assert f"| `{cls.__struct_config__.tag}` |" in table
    assert "| `MailBatch` | 3 | `items` |" in table
    assert "`sender`" not in table.split("| `IngressMail` |")[1].split("\n")[0]  # its wire name
    assert "`from`?" in table.split("| `IngressMail` |")[1].split("\n")[0]


def test_the_command_checks_and_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _package(tmp_path, "app", "The app.")
    _package(tmp_path, "app/room", "A room.")
    _tree_doc(tmp_path)
    monkeypatch.setattr("tests.support.maps.REPO", tmp_path)

    assert main(["--check"]) == 1
    out = capsys.readouterr()
    assert "+app/  The app" in out.out and COMMAND in out.err
    assert main(["--write"]) == 0
    assert main(["--check"]) == 0


# --- bench scripts cited ------------------------------------------------------------

_CITED = re.compile(r"(?<![\w/.-])bench/[a-z0-9_/]+\.py\b")
"""A script's path from the repository's root, as a command or a reference names it (not a
path inside another tree, ``/tmp/x/bench/...``)."""
CITING = ("README.md", "pyproject.toml", "docs/*.md", *(f"{tree}/**/*.py" for tree in (
    "runtime", "hub", "sidecar", "tests", "bench",
)))  # fmt: skip
"""Where a script is cited: the docs, and the code's docstrings, comments and strings."""
RETIRED = {
    "bench/hub_lone.py": "folded into bench/mail/lone_mail.py; the notebook keeps the name it"
    " ran under",
}
"""Scripts gone that a record of a past run still names, each with where it went."""


def citations(root: Path) -> Iterator[tuple[str, str]]:
    """``(where, path)`` for every bench script cited under ``root``, ``where`` as ``file:line``."""
    for pattern in CITING:
        for source in sorted(root.glob(pattern)):
            lines = source.read_text(encoding="utf-8").splitlines()
            for number, line in enumerate(lines, 1):
                for path in _CITED.findall(line):
                    yield f"{source.relative_to(root).as_posix()}:{number}", path


def stale_citations(root: Path) -> list[str]:
    return [
        f"{where}: {path} is not a file"
        for where, path in citations(root)
        if path not in RETIRED and not (root / path).is_file()
    ]


def test_every_bench_script_cited_is_where_it_is_cited() -> None:
    stale = stale_citations(REPO)
    assert stale == [], "a script moved or renamed: name it where it is now\n" + "\n".join(stale)
    cited = {path for _, path in citations(REPO)}
    assert {"bench/suite.py", "bench/mail/bench_e2e.py"} <= cited  # the scan reads docs and code
    kept = [path for path in RETIRED if (REPO / path).exists() or path not in cited]
    assert kept == [], "back, or no longer cited: drop it from RETIRED"


def test_a_script_cited_where_it_no_longer_is_is_named(tmp_path: Path) -> None:
    # Assembled, as this module is scanned too and must not cite a script that is not there.
    gone, there = "/".join(("bench", "lone.py")), "/".join(("bench", "mail", "lone.py"))
    (tmp_path / "bench" / "mail").mkdir(parents=True)
    (tmp_path / there).write_text('"""A script."""\n')
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "perf.md").write_text(
        f"Run `.venv/bin/python {there}`.\n\n    .venv/bin/python {gone} --json\n"
    )
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "lane.py").write_text(f"# measured by {gone} (and in /tmp/t/{gone})\n")
    (tmp_path / "README.md").write_text(f"{there}\n")
    assert stale_citations(tmp_path) == [
        f"docs/perf.md:3: {gone} is not a file",
        f"hub/lane.py:1: {gone} is not a file",
    ]
