"""What enforcing IAM costs a local request: DynamoDB calls of parse's role, with and without.

The local cloud checks every request's signature and the caller's policies
(docs/local.md, "IAM"). This deploys the stack twice in one process, IAM enforced and not,
alternating, and times ``PutItem`` + ``GetItem`` pairs signed by a session of parse's
execution role, in-process as the containers' bridge serves them. It prints milliseconds per
request for each and the ratio, enforced over not (the baseline measured in the same run).

    .venv/bin/python bench/iam_overhead.py [--requests 3000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from stepcrawl.emulator.server import Emulator
from stepcrawl.local.cloud import synthesize

__all__ = ["main", "per_request_ms"]

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"


def per_request_ms(template: dict[str, Any], *, enforce: bool, requests: int) -> float:
    """Milliseconds per request of parse's role on a fresh deployment."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        emulator = Emulator(template, enforce_iam=enforce)
        stack = emulator.start()
    try:
        parse = next(f for name, f in stack.functions.items() if "Parse" in name)
        role = emulator.role_identity(parse["Role"], "lambda.amazonaws.com", "bench")
        table = emulator.client("dynamodb").list_tables()["TableNames"][0]
        dynamodb = emulator.client("dynamodb", role)
        started = time.perf_counter()
        for n in range(requests // 2):
            key = {"pk": {"S": f"bench#{n % 64}"}, "sk": {"S": str(n)}}
            dynamodb.put_item(TableName=table, Item=key)
            dynamodb.get_item(TableName=table, Key=key)
        return (time.perf_counter() - started) * 1000 / (2 * (requests // 2))
    finally:
        emulator.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    template = synthesize(PIPELINES)
    found: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds):
        for enforce in (False, True):
            found[enforce].append(per_request_ms(template, enforce=enforce, requests=args.requests))
    off, on = statistics.median(found[False]), statistics.median(found[True])
    print(f"IAM not enforced: {off:.3f} ms/request (median of {args.rounds})")
    print(f"IAM enforced:     {on:.3f} ms/request")
    print(f"ratio enforced/not: {on / off:.2f}x (+{on - off:.3f} ms a request)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
