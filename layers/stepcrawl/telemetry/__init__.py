"""Telemetry: what the system says about itself.

The metric catalogue (every metric's unit, statistic, emitter, dimensions and meaning, and
the functions that publish them) and the tracing of an invocation's spans. The engine and
the functions record through it; dashboards, alarms and docs are generated from it.
"""
