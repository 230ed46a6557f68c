"""common/files.py: the one atomic file writer."""

from __future__ import annotations

import json
import os
import stat

import pytest

from common import files


def test_json_text_and_bytes_land_whole_with_an_ordinary_files_mode(tmp_path):
    files.write_json_atomic(tmp_path / "a" / "r.json", {"x": 1})
    assert json.loads((tmp_path / "a" / "r.json").read_text()) == {"x": 1}
    files.write_text_atomic(tmp_path / "t.tsv", "a\tb\n", newline="\n")
    files.write_bytes_atomic(tmp_path / "b.bin", b"\x00\x01")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    umask = os.umask(0o022)
    os.umask(umask)
    mode = stat.S_IMODE((tmp_path / "t.tsv").stat().st_mode)
    assert mode == 0o666 & ~umask  # not mkstemp's 0600: co-workers read results
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b.bin", "t.tsv"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    files.write_json_atomic(path, {"old": True})
    with pytest.raises(TypeError):
        files.write_text_atomic(path, object())  # fails inside the write
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_atomic_path_keeps_the_extension_and_renames_only_on_success(tmp_path):
    target = tmp_path / "plot.png"
    with files.atomic_path(target) as tmp:
        assert tmp.endswith(".png") and os.path.dirname(tmp) == str(tmp_path)
        with open(tmp, "wb") as f:
            f.write(b"png")
        assert not target.exists()
    assert target.read_bytes() == b"png"
    with pytest.raises(RuntimeError), files.atomic_path(target) as tmp:
        with open(tmp, "wb") as f:
            f.write(b"half")
        raise RuntimeError("killed")
    assert target.read_bytes() == b"png"
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_copy_file_atomic(tmp_path):
    (tmp_path / "src.txt").write_text("vocab\n")
    files.copy_file_atomic(tmp_path / "src.txt", tmp_path / "out" / "vocab.txt")
    assert (tmp_path / "out" / "vocab.txt").read_text() == "vocab\n"


def test_json_is_strict_and_a_non_finite_number_names_the_file(tmp_path):
    path = tmp_path / "result.json"
    with pytest.raises(ValueError, match=f"{path}: Out of range float values"):
        files.write_json_atomic(path, {"loss": float("nan")})
    assert os.listdir(tmp_path) == []
