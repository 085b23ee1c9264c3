"""Pipeline files as versions: stale saves refused, every version kept, merges from the base."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from stepcrawl.console.store import (
    ConflictError,
    FileStore,
    PipelineNotFoundError,
    ReadOnlyError,
    ReadOnlyStore,
    merge,
    version_of,
)
from stepcrawl.errors import ConfigError

TEXT = "# mine\nname: shop\ntasks: []\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "shop.yaml").write_text(TEXT)
    (tmp_path / "notes.txt").write_text("not a pipeline")
    return tmp_path


def test_a_version_is_the_hash_of_the_text_and_names_come_from_the_file(folder: Path) -> None:
    (folder / "other-file-name.yml").write_text("name: renamed\n")
    (folder / "broken.yaml").write_text("name: [\n")
    store = FileStore(folder)
    assert store.names() == ["broken", "renamed", "shop"]
    current = store.get("shop")
    assert (current.file, current.text, current.version) == ("shop.yaml", TEXT, version_of(TEXT))
    with pytest.raises(PipelineNotFoundError, match="no pipeline 'ghost'"):
        store.get("ghost")


def test_a_save_from_the_current_version_writes_and_records_it(folder: Path) -> None:
    heard: list[tuple[str, str, str]] = []
    store = FileStore(folder, on_change=lambda *event: heard.append(event))
    base = store.get("shop").version
    saved = store.save("shop", TEXT + "# more\n", base)
    assert (folder / "shop.yaml").read_text() == TEXT + "# more\n"
    assert saved.version == version_of(TEXT + "# more\n")
    history = store.history("shop")
    assert [(v.seq, v.version, v.source) for v in history] == [
        (2, saved.version, "console"),
        (1, base, "file"),
    ]
    assert store.text_at("shop", base) == TEXT
    assert heard == [("shop", base, "file"), ("shop", saved.version, "console")]
    assert not list(folder.glob(".shop.yaml.*")), "no temporary file is left behind"


def test_a_save_from_a_stale_version_is_refused_and_changes_nothing(folder: Path) -> None:
    store = FileStore(folder)
    base = store.get("shop").version
    first = store.save("shop", TEXT + "# first\n", base)
    with pytest.raises(ConflictError) as refused:
        store.save("shop", TEXT + "# second\n", base)
    assert refused.value.current.version == first.version
    assert refused.value.base == base
    assert (folder / "shop.yaml").read_text() == TEXT + "# first\n"


def test_a_change_on_disk_is_a_new_version_a_stale_save_cannot_overwrite(folder: Path) -> None:
    store = FileStore(folder)
    base = store.get("shop").version
    (folder / "shop.yaml").write_text(TEXT + "# from vim\n")
    store.scan()
    assert store.history("shop")[0].source == "file"
    with pytest.raises(ConflictError):
        store.save("shop", TEXT + "# console\n", base)


def test_of_racing_saves_from_one_version_exactly_one_wins(folder: Path) -> None:
    stores = [FileStore(folder) for _ in range(8)]  # as if eight servers shared the folder
    base = stores[0].get("shop").version
    outcomes: list[str] = []

    def save(number: int) -> None:
        try:
            stores[number].save("shop", TEXT + f"# writer {number}\n", base)
            outcomes.append("saved")
        except ConflictError:
            outcomes.append("conflict")

    threads = [threading.Thread(target=save, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["conflict"] * 7 + ["saved"]


def test_history_is_bounded(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("stepcrawl.console.store.HISTORY_LIMIT", 3)
    store = FileStore(folder)
    version = store.get("shop").version
    for number in range(5):
        version = store.save("shop", TEXT + f"# {number}\n", version).version
    assert [v.seq for v in store.history("shop")] == [6, 5, 4]


def test_create_refuses_an_existing_name(folder: Path) -> None:
    store = FileStore(folder, only=frozenset({"shop.yaml"}))
    created = store.create("fresh", "name: fresh\n")
    assert (folder / "fresh.yaml").read_text() == "name: fresh\n"
    assert store.names() == ["fresh", "shop"]  # `only` grows with what the console creates
    assert created.version == version_of("name: fresh\n")
    with pytest.raises(ConfigError, match="exists already"):
        store.create("shop", "name: shop\n")


def test_a_file_keeps_its_permissions_across_a_save(folder: Path) -> None:
    (folder / "shop.yaml").chmod(0o600)
    store = FileStore(folder)
    store.save("shop", TEXT + "#\n", store.get("shop").version)
    assert (folder / "shop.yaml").stat().st_mode & 0o777 == 0o600


def test_the_read_only_store_never_writes(folder: Path) -> None:
    store = ReadOnlyStore(folder)
    current = store.get("shop")
    with pytest.raises(ReadOnlyError, match="cdk deploy"):
        store.save("shop", "x", current.version)
    assert [v.version for v in store.history("shop")] == [current.version]
    assert store.text_at("shop", current.version) == TEXT
    assert store.text_at("shop", "0" * 12) is None


def test_merge_takes_both_sides_and_marks_a_real_conflict() -> None:
    base = "a: 1\nb: 2\nc: 3\n"
    merged, conflicts = merge(base, "a: 10\nb: 2\nc: 3\n", "a: 1\nb: 2\nc: 30\n")
    assert (merged, conflicts) == ("a: 10\nb: 2\nc: 30\n", False)
    merged, conflicts = merge(base, "a: 10\nb: 2\nc: 3\n", "a: 11\nb: 2\nc: 3\n")
    assert conflicts
    assert "<<<<<<< your edit\na: 11\n=======\na: 10\n>>>>>>> saved version\n" in merged
