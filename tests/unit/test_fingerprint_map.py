"""The compact fingerprint map behaves as a dict of ints, whatever the order of changes."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from stepcrawl.crawl.fingerprints import FingerprintMap


@pytest.mark.parametrize("seed", range(8))
def test_it_agrees_with_a_dict_through_sets_adds_and_discards(seed: int) -> None:
    rng = random.Random(seed)
    # Few distinct keys, so that changes hit the arrays, the recent dict and tombstones.
    keys = [rng.getrandbits(64) for _ in range(rng.choice([50, 3000, 20_000]))]
    compact, plain = FingerprintMap(), dict[int, int]()
    for step in range(60_000):
        fp, value = rng.choice(keys), rng.randrange(1, 2**32)
        match rng.random():
            case r if r < 0.5:
                compact[fp] = value
                plain[fp] = value
            case r if r < 0.8:
                compact.add(fp, value)
                plain.setdefault(fp, value)
            case _:
                compact.discard(fp)
                plain.pop(fp, None)
        if step % 997 == 0:
            probe = rng.choice(keys)
            assert compact.get(probe) == plain.get(probe)
            assert len(compact) == len(plain)
    assert all(compact.get(fp) == plain.get(fp) for fp in keys)
    assert all((fp in compact) == (fp in plain) for fp in keys)
    assert len(compact) == len(plain)
    assert list(compact.items()) == sorted(plain.items())
    assert list(compact) == sorted(plain)
    assert compact == FingerprintMap(plain.items())


def test_values_must_fit_32_bits_and_not_be_the_tombstone() -> None:
    compact = FingerprintMap()
    for bad in (0, -1, 2**32):
        with pytest.raises(ValueError, match="out of"):
            compact[1] = bad
    assert "a string" not in compact
    assert 2**64 - 1 not in compact


def test_an_entry_takes_about_twelve_bytes() -> None:
    """The memory it is for: a set of ints alone takes ~60 bytes an entry (issue 24)."""
    rng = random.Random(1)
    count = 100_000
    tracemalloc.start()
    compact = FingerprintMap()
    for n in range(count):
        compact.add(rng.getrandbits(64), 1 + n // 25)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(compact) == count
    assert held < 20 * count, f"{held / count:.1f} bytes an entry"
    entries = len(list(compact.items()))  # merged: every entry in the arrays
    assert compact.nbytes() == 12 * entries == 12 * count
