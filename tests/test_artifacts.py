"""retrieval.artifacts: atomic file and directory replacement, including a rename failing at each step, the atomic
``latest`` link, and an index directory written through them (no TensorFlow)."""

import errno
import os

import numpy as np
import pytest

from retrieval import artifacts
from retrieval.index import ItemIndex, build_index


def _fail_calls(monkeypatch, name: str, failing: set) -> None:
    """Makes the calls numbered ``failing`` (from 1) of ``os.<name>`` raise, as a full disk or a lost mount would."""
    real, calls = getattr(os, name), []

    def patched(src, dst, *args, **kwargs):
        calls.append((src, dst))
        if len(calls) in failing:
            raise OSError(errno.EIO, f"injected failure of {name} call {len(calls)}")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, name, patched)


def _make_dir(path, text: str) -> None:
    path.mkdir()
    (path / "data.txt").write_text(text)


def _entries(directory) -> list:
    return sorted(p.name for p in directory.iterdir())


def test_file_is_replaced_and_no_temporary_is_left(tmp_path):
    artifacts.write_json(tmp_path / "m.json", {"v": 1})
    artifacts.write_json(tmp_path / "m.json", {"v": 2})
    assert artifacts.read_json(tmp_path / "m.json") == {"v": 2}
    assert _entries(tmp_path) == ["m.json"]


def test_directory_is_replaced_whole(tmp_path):
    _make_dir(tmp_path / "index", "old")
    (tmp_path / "index" / "stale.txt").write_text("only in the old copy")
    with artifacts.atomic_path(tmp_path / "index") as tmp:
        _make_dir(tmp, "new")
    assert _entries(tmp_path / "index") == ["data.txt"]
    assert (tmp_path / "index" / "data.txt").read_text() == "new"
    assert _entries(tmp_path) == ["index"]


def test_failure_while_writing_keeps_the_old_directory(tmp_path):
    _make_dir(tmp_path / "index", "old")
    with pytest.raises(RuntimeError):
        with artifacts.atomic_path(tmp_path / "index") as tmp:
            _make_dir(tmp, "half")
            raise RuntimeError("crash while writing")
    assert (tmp_path / "index" / "data.txt").read_text() == "old"
    assert _entries(tmp_path) == ["index"]


@pytest.mark.parametrize("failing_call", [1, 2], ids=["moving-old-aside", "moving-new-in"])
def test_a_failed_rename_keeps_the_old_directory(tmp_path, monkeypatch, failing_call):
    _make_dir(tmp_path / "index", "old")
    _fail_calls(monkeypatch, "rename", {failing_call})
    with pytest.raises(OSError, match="injected"):
        with artifacts.atomic_path(tmp_path / "index") as tmp:
            _make_dir(tmp, "new")
    assert (tmp_path / "index" / "data.txt").read_text() == "old"
    assert _entries(tmp_path) == ["index"]


def test_a_failed_move_back_keeps_the_old_copy_on_disk(tmp_path, monkeypatch):
    _make_dir(tmp_path / "index", "old")
    _fail_calls(monkeypatch, "rename", {2, 3})  # the new one cannot move in, the old one cannot move back
    with pytest.raises(OSError, match="old copy") as raised:
        with artifacts.atomic_path(tmp_path / "index") as tmp:
            _make_dir(tmp, "new")
    aside = str(raised.value).rpartition("it is at ")[2]
    assert os.path.dirname(os.path.dirname(aside)) == str(tmp_path)
    assert open(os.path.join(aside, "data.txt")).read() == "old"


def test_a_new_directory_arrives_in_one_rename(tmp_path, monkeypatch):
    _fail_calls(monkeypatch, "replace", {1})
    with pytest.raises(OSError, match="injected"):
        with artifacts.atomic_path(tmp_path / "index") as tmp:
            _make_dir(tmp, "new")
    assert _entries(tmp_path) == []


def test_point_link_failure_keeps_the_old_target(tmp_path, monkeypatch):
    artifacts.point_link(tmp_path / "latest", "r1")
    _fail_calls(monkeypatch, "replace", {1})
    with pytest.raises(OSError, match="injected"):
        artifacts.point_link(tmp_path / "latest", "r2")
    assert os.readlink(tmp_path / "latest") == "r1"
    assert _entries(tmp_path) == ["latest"]


def test_a_failed_index_save_keeps_the_old_index_loadable(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    ids = np.array([f"item{i}" for i in range(40)], dtype=object)
    build_index(rng.standard_normal([40, 4]).astype(np.float32), ids, factory="Flat", recall_k=5).save(tmp_path / "index")
    retrained = build_index(rng.standard_normal([40, 4]).astype(np.float32), ids[::-1].copy(), factory="Flat",
                            recall_k=5)
    _fail_calls(monkeypatch, "rename", {2})
    with pytest.raises(OSError, match="injected"):
        retrained.save(tmp_path / "index")
    monkeypatch.undo()
    assert list(ItemIndex.load(tmp_path / "index").id_map.ids_of(np.array([2, 3]))) == ["item0", "item1"]
