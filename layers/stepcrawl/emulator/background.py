"""One daemon thread with start / stop / ``with``: the shape of local mode's helpers.

The scheduler and the TTL reaper each play an AWS service on a thread of their own; this is
their common lifecycle, so that stopping works the same for both (and quickly: the thread
waits on :attr:`stopping`, never on a plain sleep).
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Self

__all__ = ["BackgroundThread"]

log = logging.getLogger(__name__)


class BackgroundThread:
    """Subclasses implement :meth:`_run` (looping until :attr:`stopping` is set)."""

    thread_name = "stepcrawl-local"

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        raise NotImplementedError

    def _before_start(self) -> None:
        """Runs on the caller's thread just before the thread starts."""

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError(f"{self.thread_name} was already started")
        self._before_start()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (work in progress is finished first)."""
        self.stopping.set()
        thread = self._thread
        # stop() may be called from the thread's own work (a callback, a fake sleep).
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("%s did not stop within %.1f s", self.thread_name, timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
