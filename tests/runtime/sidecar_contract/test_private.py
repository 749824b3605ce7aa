"""Private state: modes tightened, umask, and a deleted deployment's directory
removed only when no sidecar runs from it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import make_private, record_path
from runtime.sidecar_contract import remove_sidecar_state
from sidecar._errors import RestoreRecordMissing
from sidecar._home import Home

DEP = "dep_" + "0" * 26


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_make_private_takes_group_and_other_bits_off_everything(tmp_path: Path) -> None:
    root = tmp_path / "state"
    (root / "logs").mkdir(parents=True)
    (root / "hub.db").write_text("x")
    (root / "logs" / "hub.log").write_text("x")
    (root / "tool").write_text("x")
    os.chmod(root, 0o755)
    os.chmod(root / "logs", 0o775)
    os.chmod(root / "hub.db", 0o644)
    os.chmod(root / "logs" / "hub.log", 0o666)
    os.chmod(root / "tool", 0o755)
    outside = tmp_path / "outside"
    outside.write_text("x")
    os.chmod(outside, 0o644)
    (root / "link").symlink_to(outside)

    assert make_private(root) == 5
    assert [mode(root), mode(root / "logs")] == [0o700, 0o700]
    assert [mode(root / "hub.db"), mode(root / "logs" / "hub.log")] == [0o600, 0o600]
    assert mode(root / "tool") == 0o700  # the owner's bits stay
    assert mode(outside) == 0o644  # a symlink is not followed
    assert make_private(root) == 0


def test_make_private_without_recursion_leaves_what_is_below(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_text("x")
    (tmp_path / "f").write_text("x")
    for p in (tmp_path / "sub", tmp_path / "sub" / "f", tmp_path / "f"):
        os.chmod(p, 0o755)
    make_private(tmp_path, recursive=False)
    assert [mode(tmp_path / "sub"), mode(tmp_path / "f")] == [0o700, 0o700]
    assert mode(tmp_path / "sub" / "f") == 0o755


def test_private_umask_makes_new_files_owner_only(tmp_path: Path) -> None:
    code = (
        "import os, sys; from runtime import private_umask; private_umask();"
        " open(sys.argv[1], 'w').close(); os.mkdir(sys.argv[2])"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "f"), str(tmp_path / "d")], check=True
    )
    assert [mode(tmp_path / "f"), mode(tmp_path / "d")] == [0o600, 0o700]


def sidecar_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "sidecars" / DEP
    record = record_path(directory, DEP)
    record.parent.mkdir(parents=True)
    record.write_text("{}")
    (record.parent / "inbox.db").write_text("x")
    return directory


def test_a_sidecar_dir_is_removed_when_no_sidecar_runs_from_it(tmp_path: Path) -> None:
    directory = sidecar_dir(tmp_path)
    assert remove_sidecar_state(directory, DEP) is True
    assert not directory.exists()
    assert remove_sidecar_state(directory, DEP) is True  # already gone: fine


def test_a_sidecar_dir_is_kept_while_a_sidecar_holds_its_home(tmp_path: Path) -> None:
    directory = sidecar_dir(tmp_path)
    home = record_path(directory, DEP).parent
    with Home(home):
        assert remove_sidecar_state(directory, DEP) is False
        assert record_path(directory, DEP).is_file()
    assert remove_sidecar_state(directory, DEP) is True
    assert not directory.exists()


def test_a_sidecar_starting_during_the_removal_stops_before_it_writes(tmp_path: Path) -> None:
    # The removal holds the home lock: a sidecar that read its record just
    # before finds the lock taken, then its directory gone; it creates nothing.
    directory = sidecar_dir(tmp_path)
    home = record_path(directory, DEP).parent
    assert remove_sidecar_state(directory, DEP) is True
    with pytest.raises(RestoreRecordMissing, match="removed"), Home(home):
        pass
    assert not directory.exists()
