"""AWS list prices the cost model uses (USD): us-east-1, on-demand, Lambda on arm64.

Checked on 2026-12-01 against these pages (read directly for Step Functions and X-Ray; for the
others, through copies and articles quoting them, which agreed with each other). The first
price tier of each; free tiers are left out, since a crawl at scale is past them:

- Lambda, arm64: $0.20 per million requests, $0.0000133334 per GB-second (first 7.5 billion
  GB-seconds a month): https://aws.amazon.com/lambda/pricing/
- SQS, standard queue: $0.40 per million requests (first 100 billion a month); every 64 KiB
  chunk of a request's payload is billed as one request: https://aws.amazon.com/sqs/pricing/
- DynamoDB, on-demand: $0.625 per million write request units, $0.125 per million read
  request units (the prices since the November 2024 reduction):
  https://aws.amazon.com/dynamodb/pricing/on-demand/
- S3 Standard: $0.005 per 1,000 PUT, COPY, POST or LIST requests; $0.0004 per 1,000 GET,
  SELECT and other requests: https://aws.amazon.com/s3/pricing/
- Step Functions, standard workflows: $0.025 per 1,000 state transitions:
  https://aws.amazon.com/step-functions/pricing/
- CloudWatch: Logs ingestion $0.50 per GB (standard class; Lambda's logs are "vended" logs,
  whose first tier, up to 10 TB a month, is the same price); custom metrics $0.30 per metric
  per month (first 10,000 metrics). Metrics extracted from EMF log lines are priced as custom
  metrics, with no PutMetricData request charge; the model takes metric charges as prorated
  by the hour (a month = 730 hours), which is how the pricing page describes them:
  https://aws.amazon.com/cloudwatch/pricing/
- X-Ray: $5.00 per million traces recorded, $0.50 per million traces retrieved or scanned:
  https://aws.amazon.com/xray/pricing/

Prices change: update the figures, the date above and docs/performance.md together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["HOURS_PER_MONTH", "PRICES", "PRICES_CHECKED", "REGION", "Prices"]

PRICES_CHECKED: Final = "2026-12-01"
REGION: Final = "us-east-1"
#: CloudWatch prorates a metric's monthly price by the hour over a 730-hour month.
HOURS_PER_MONTH: Final = 730


@dataclass(frozen=True)
class Prices:
    """USD per billed unit (see the module docstring for the sources)."""

    lambda_request: float = 0.20 / 1e6
    lambda_gb_second: float = 0.0000133334  # arm64
    sqs_request: float = 0.40 / 1e6  # standard queue, per 64 KiB chunk
    ddb_write_unit: float = 0.625 / 1e6  # on-demand write request unit
    ddb_read_unit: float = 0.125 / 1e6  # on-demand read request unit
    s3_put_request: float = 0.005 / 1e3  # PUT, COPY, POST, LIST
    s3_get_request: float = 0.0004 / 1e3  # GET, SELECT, all others
    sfn_state_transition: float = 0.025 / 1e3  # standard workflows
    logs_ingested_gb: float = 0.50
    metric_month: float = 0.30  # one custom metric for a month
    xray_trace_recorded: float = 5.00 / 1e6
    xray_trace_retrieved: float = 0.50 / 1e6


PRICES: Final = Prices()
