"""Printing a container's metrics as CloudWatch Embedded Metric Format lines (Powertools).

CloudWatch Logs extracts the metrics from the lines the function prints; nothing calls
PutMetricData. Local mode reads the same lines back (:mod:`stepcrawl.emulator.metrics`).
"""

from __future__ import annotations

from typing import Final

from stepcrawl.names import METRICS_NAMESPACE
from stepcrawl.telemetry.recorder import MetricRecorder, Recorded

__all__ = ["publish_metrics"]

#: Samples of one metric per EMF line: Powertools prints a line by itself at the 100th value
#: (EMF's limit), which would leave the rest of the line's metrics to a second line anyway.
_SAMPLES_PER_LINE: Final = 99


def publish_metrics(service: str, recorder: MetricRecorder) -> int:
    """Print what ``recorder`` (a container's) holds as EMF lines through Powertools, and
    forget it; the number of lines.

    One line per set of dimension values (EMF gives a line's metrics one set of values): its
    ``Dimensions`` are every dimension set the catalogue declares for those metrics, each with
    ``service``, so CloudWatch keeps the per-task series and the function's total from one line.
    """
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (  # noqa: PLC0415
        AmazonCloudWatchEMFProvider,
    )

    held = recorder.drain()
    lines: dict[tuple[tuple[tuple[str, str], ...], tuple[tuple[str, ...], ...]], list[Recorded]]
    lines = {}
    for recorded in held:
        lines.setdefault((recorded.dimensions, recorded.spec.dimensions), []).append(recorded)
    printed = 0
    for (dimensions, dimension_sets), metrics in lines.items():
        values = dict(dimensions)
        longest = max(len(m.values) for m in metrics)
        for start in range(0, longest, _SAMPLES_PER_LINE):
            provider = AmazonCloudWatchEMFProvider(namespace=METRICS_NAMESPACE)
            provider.add_dimension(name="service", value=service)
            for name in dimension_sets[0]:
                provider.add_dimension(name=name, value=values[name])
            for extra in dimension_sets[1:]:
                provider.add_dimensions(service=service, **{name: values[name] for name in extra})
            for metric in metrics:
                for value in metric.values[start : start + _SAMPLES_PER_LINE]:
                    provider.add_metric(name=metric.spec.name, unit=metric.spec.unit, value=value)
            if provider.metric_set:
                provider.flush_metrics()
                printed += 1
    return printed
