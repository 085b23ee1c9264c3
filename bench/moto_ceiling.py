"""How many conditional DynamoDB writes per second moto's server can take: local mode's ceiling.

A crawl makes two conditional `UpdateItem`s per page (the claim of a new URL, the stamp of a
fetched page), so this number halved bounds `stepcrawl run`'s pages per second whatever the
crawler does. Same server and patches as local mode, on 127.0.0.1; N client threads each
write their own keys with the claim's expression.

    .venv/bin/python bench/moto_ceiling.py [--writes 400] [--threads 1 5]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from stepcrawl.emulator.moto_patches import apply_moto_patches


def client(endpoint: str) -> Any:
    return boto3.client(  # type: ignore[call-overload]
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def run(endpoint: str, threads: int, writes: int) -> tuple[float, float]:
    latencies: list[float] = []

    def worker(name: str) -> None:
        own = client(endpoint)
        for i in range(writes // threads):
            started = time.perf_counter()
            own.update_item(
                TableName="t",
                Key={"pk": {"S": f"URL#{name}#{i}"}, "sk": {"S": "U"}},
                UpdateExpression="SET #s = if_not_exists(#s, :s), #o = if_not_exists(#o, :o)",
                ExpressionAttributeNames={"#s": "state", "#o": "owner"},
                ExpressionAttributeValues={":s": {"S": "pending"}, ":o": {"S": "abc"}},
                ReturnValues="ALL_NEW",
            )
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    workers = [threading.Thread(target=worker, args=(f"{threads}-{n}",)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return len(latencies) / (time.perf_counter() - started), statistics.median(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=400)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 5])
    args = parser.parse_args()
    apply_moto_patches()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client(endpoint).create_table(
            TableName="t",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        for threads in args.threads:
            rate, median = run(endpoint, threads, args.writes)
            print(f"{threads} thread(s): {rate:.0f} writes/s, median {median * 1000:.1f} ms")
    finally:
        server.stop()


if __name__ == "__main__":
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    main()
