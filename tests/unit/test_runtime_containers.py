"""A thread that played a container of a stopped local cloud starts cold on its next invocation."""

from __future__ import annotations

import threading

from stepcrawl.runtime import close_containers, container_fetcher, container_loop


def test_a_closed_container_starts_cold_on_the_next_invocation() -> None:
    seen: dict[str, object] = {}

    def container() -> None:  # its own thread: the test runner's thread keeps no loop
        loop, fetcher = container_loop(), container_fetcher()
        assert container_loop() is loop  # warm
        assert container_fetcher() is fetcher
        close_containers()  # what a stopping local cloud does
        assert loop.is_closed()
        seen["loop"] = container_loop()
        seen["fetcher"] = container_fetcher()
        seen["old"] = (loop, fetcher)
        close_containers()

    thread = threading.Thread(target=container)
    thread.start()
    thread.join(timeout=30)
    old_loop, old_fetcher = seen["old"]  # type: ignore[misc]
    assert seen["loop"] is not old_loop
    assert seen["fetcher"] is not old_fetcher
    assert seen["loop"].is_closed()  # type: ignore[attr-defined]  # closed by the second stop
