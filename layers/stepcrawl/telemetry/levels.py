"""Following the telemetry level in a container: read the scaler's, apply it to the loggers.

The scaler decides the level (:mod:`stepcrawl.telemetry.shedding`) and keeps it on its fetch
item; a container re-reads it at most every :data:`TELEMETRY_TTL` seconds
(:class:`TelemetryCache`) and sets its loggers (and, on Lambda with tracing, the X-Ray SDK)
to it (:class:`LogLevels`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Final

from stepcrawl.environment import PlatformEnvironment
from stepcrawl.storage import Table
from stepcrawl.table_keys import scaler_key
from stepcrawl.telemetry.shedding import SheddingState, TelemetryLevel

__all__ = [
    "SHED_LOGGERS",
    "SHED_LOG_LEVEL",
    "TELEMETRY_TTL",
    "LogLevels",
    "TelemetryCache",
    "read_telemetry",
]

#: The scaler item that holds the level: the fetch function's (the window's too).
_LEVEL_FUNCTION: Final = "fetch"
#: Seconds a container keeps the telemetry level it read: the level changes after 30 s of
#: trouble at the earliest, so a container follows it within a minute for one read per 30 s.
TELEMETRY_TTL: Final = 30.0
#: The loggers a shed level quiets besides the handler's own (Powertools' ``Logger`` logs
#: through the standard logger named after its service).
SHED_LOGGERS: Final = ("stepcrawl",)
#: Their level while shed: warnings and errors still say what goes wrong.
SHED_LOG_LEVEL: Final = logging.WARNING

_log = logging.getLogger("stepcrawl.telemetry")


def read_telemetry(table: Table) -> TelemetryLevel:
    """The telemetry level the scaler set last (full while no scaler has decided one)."""
    return SheddingState.of(table.get(scaler_key(_LEVEL_FUNCTION), consistent=False)).level


class TelemetryCache:
    """The level a container's functions log at: the scaler's last one, re-read at most
    every :data:`TELEMETRY_TTL` seconds. A failed read keeps the last level: telemetry is
    not worth failing a batch over."""

    def __init__(self, table: Table, clock: Callable[[], float]) -> None:
        self.table, self.clock = table, clock
        self._value = TelemetryLevel.FULL
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def __call__(self) -> TelemetryLevel:
        with self._lock:
            now = self.clock()
            if self._read_at is None or now - self._read_at >= TELEMETRY_TTL:
                self._read_at = now
                try:
                    self._value = read_telemetry(self.table)
                except Exception:  # noqa: BLE001 - keep the last level, try again after the TTL
                    _log.warning("telemetry level not read; keeping %s", self._value.value)
            return self._value


class LogLevels:
    """The levels of a process's loggers as the telemetry level sets them.

    Loggers are process-wide, so one instance serves a process (on Lambda a container; in
    local mode every container thread shares it, as they share the loggers). ``environ``
    says whether Powertools' Tracer records here (on Lambda, not disabled).
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        #: Each shed logger's level before shedding (restored on recovery).
        self._configured: dict[str, int] = {}
        #: The level applied last per service: loggers and the SDK change only on a change.
        self._applied: dict[str, TelemetryLevel] = {}
        self._lock = threading.Lock()

    def set(self, level: TelemetryLevel, service: str) -> None:
        """Set the loggers of ``service`` (its Powertools logger and :data:`SHED_LOGGERS`)
        to ``level``: at ``shed``, :data:`SHED_LOG_LEVEL` unless configured higher; at
        ``full``, back to what they were configured with. On Lambda with tracing, also turn
        the X-Ray SDK's subsegments (the handler's, boto3 calls') off while shed: Lambda's
        own sampling of the functions cannot be changed, but what a sampled invocation
        records can."""
        with self._lock:
            if self._applied.get(service) is level:
                return
            self._applied[service] = level
            for name in (service, *SHED_LOGGERS):
                logger = logging.getLogger(name)
                if level is TelemetryLevel.SHED:
                    configured = self._configured.setdefault(name, logger.level)
                    logger.setLevel(max(SHED_LOG_LEVEL, configured))
                elif name in self._configured:
                    logger.setLevel(self._configured.pop(name))
        self._set_tracing(level)

    def restore(self) -> None:
        """Every service back to ``full`` (local mode, once its containers are gone)."""
        with self._lock:
            services = list(self._applied)
        for service in services:
            self.set(TelemetryLevel.FULL, service)

    def _set_tracing(self, level: TelemetryLevel) -> None:
        """Where Powertools' Tracer records (on Lambda, not disabled): the SDK on only at full."""
        platform = PlatformEnvironment.read(self._environ)
        if not platform.on_lambda or not platform.traced_by_config:
            return  # the Tracer is off (tests, local mode): nothing records, nothing to change
        try:
            from aws_xray_sdk import global_sdk_config  # type: ignore[import-untyped]  # noqa: PLC0415
        except ImportError:  # pragma: no cover - the layer has it (Powertools' Tracer needs it)
            return
        global_sdk_config.set_sdk_enabled(level is TelemetryLevel.FULL)
