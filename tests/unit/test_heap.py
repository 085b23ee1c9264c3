"""The long-lived heaps of local mode's processes (emulator/heap.py): what a process builds
to serve is frozen, what it makes while serving is still collected."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from stepcrawl.emulator.heap import long_lived, thaw_heap


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    yield
    thaw_heap()
    gc.enable()


def _tracked(thing: object) -> bool:
    """Whether a generation the collector visits holds ``thing`` (a frozen one is in none)."""
    return any(o is thing for generation in (0, 1, 2) for o in gc.get_objects(generation))


def test_what_is_built_inside_is_frozen_and_the_collector_runs_again() -> None:
    with long_lived():
        assert not gc.isenabled()  # no pass over a heap still growing
        built = [object()]
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    assert not _tracked(built)
    made = [object()]
    assert _tracked(made)  # made after: collected as before
    thaw_heap()
    assert gc.get_freeze_count() == 0
    assert _tracked(built)


def test_a_failed_build_is_frozen_too_and_the_error_raised() -> None:
    """The cloud's stop thaws what a failed start froze (local/cloud.py)."""
    built: list[object] = []

    def deploy() -> None:
        with long_lived():
            built.append(object())
            raise RuntimeError("deploy failed")

    with pytest.raises(RuntimeError, match="deploy failed"):
        deploy()
    assert gc.isenabled()
    assert not _tracked(built)


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    with long_lived():
        pass
    assert not gc.isenabled()
