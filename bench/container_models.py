"""Local Lambda containers as threads or as processes: throughput of each design, side by side.

Issue 26 asks for the designs to be measured before one is chosen. Each "invocation" here is
what a crawl invocation does in miniature: extract one generated product page with
selectolax (the CPU part; ~10% of a local crawl's profile) and make the AWS calls a page's
share of the engine makes (a conditional DynamoDB write, a read, a query, an SQS send and a
receive + delete; ~40% of the profile is botocore and moto). Three designs, in the same run:

- ``threads``: today's. Containers are threads of the process that runs moto's server, and
  their clients reach moto's backends without HTTP (``emulator/in_process.py``).
- ``processes``: containers are processes; moto's server stays in this process and they reach
  it over HTTP on 127.0.0.1, as a container reaches AWS.
- ``server-process``: the same, with moto's server in a process of its own too (this one only
  waits), so the server's and the containers' Python run on separate cores.
- ``processes-rpc``: containers are processes, and each botocore request (method, URL,
  headers, body: signed as for AWS) travels over a local connection to this process, which
  hands it to moto's request handler as ``emulator/in_process.py`` does: no HTTP server, no
  werkzeug, the routing and the answers moto's own.

Invocations per second for each design and container count, with the ratio against
``threads`` at the same count. Only loopback; bounded in count.

    .venv/bin/python bench/container_models.py [--invocations 240] [--containers 1 2 4]
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import Any

from selectolax.lexbor import LexborHTMLParser

_TABLE, _QUEUE = "bench", "bench"
_AUTHKEY = b"container-models"


def _page(n: int) -> str:
    cards = "".join(
        f'<li class="product"><a href="/p/{n}-{i}"><h3>Product {i}</h3></a>'
        f'<span class="price">{i}.99</span><p class="desc">{"text " * 20}</p></li>'
        for i in range(60)
    )
    return f"<html><head><title>Page {n}</title></head><body><ul>{cards}</ul></body></html>"


def _client(service: str, endpoint: str) -> Any:
    import boto3  # noqa: PLC0415 - in the container

    return boto3.client(  # type: ignore[call-overload]
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def _invocations(endpoint: str, name: str, count: int) -> int:
    """One container's invocations: extract a page, then the page's share of AWS calls."""
    dynamodb, sqs = _client("dynamodb", endpoint), _client("sqs", endpoint)
    queue = sqs.get_queue_url(QueueName=_QUEUE)["QueueUrl"]
    for i in range(count):
        tree = LexborHTMLParser(_page(i))
        items = [
            (card.css_first("h3").text(), card.css_first(".price").text())  # type: ignore[union-attr]
            for card in tree.css("li.product")
        ]
        key = {"pk": {"S": f"T#{name}"}, "sk": {"S": f"{i:06d}"}}
        dynamodb.put_item(
            TableName=_TABLE,
            Item={**key, "n": {"N": str(len(items))}},
            ConditionExpression="attribute_not_exists(pk)",
        )
        dynamodb.get_item(TableName=_TABLE, Key=key, ConsistentRead=True)
        dynamodb.query(
            TableName=_TABLE,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": f"T#{name}"}},
            Limit=5,
        )
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(items[:3]))
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=1).get("Messages", [])
        for message in got:
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
    return count


def _rpc_serve(listener: Any) -> None:
    """Answer each container connection's requests with moto's handlers (in this process)."""
    from botocore.awsrequest import AWSPreparedRequest  # noqa: PLC0415

    from stepcrawl.emulator.in_process import dispatch  # noqa: PLC0415

    def answer(connection: Any) -> None:
        with connection:
            while True:
                try:
                    method, url, headers, body = connection.recv()
                except EOFError:
                    return
                request = AWSPreparedRequest(method, url, headers, body, stream_output=False)
                response = dispatch(request)
                assert response is not None, url
                connection.send((response.status_code, dict(response.headers), response.content))

    while True:
        try:
            connection = listener.accept()
        except OSError:
            return  # the listener was closed
        threading.Thread(target=answer, args=(connection,), daemon=True).start()


def _rpc_invocations(address: str, endpoint: str, name: str, count: int) -> int:
    """:func:`_invocations` in a container whose botocore requests go over ``address``."""
    from multiprocessing.connection import Client  # noqa: PLC0415

    from botocore.awsrequest import AWSResponse  # noqa: PLC0415
    from botocore.endpoint import Endpoint  # noqa: PLC0415
    from moto.core.botocore_stubber import MockRawResponse  # noqa: PLC0415

    connection = Client(address, authkey=_AUTHKEY)
    lock = threading.Lock()

    def send(_self: Endpoint, request: Any) -> AWSResponse:
        body = request.body
        if hasattr(body, "read"):
            body = body.read()
        with lock:
            connection.send((request.method, request.url, dict(request.headers), body))
            status, headers, content = connection.recv()
        return AWSResponse(request.url, status, headers, MockRawResponse(content))

    setattr(Endpoint, "_send", send)  # noqa: B010 - the prototype's transport
    return _invocations(endpoint, name, count)


def _prepare(endpoint: str) -> None:
    dynamodb = _client("dynamodb", endpoint)
    if _TABLE not in dynamodb.list_tables()["TableNames"]:
        dynamodb.create_table(
            TableName=_TABLE,
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
    _client("sqs", endpoint).create_queue(QueueName=_QUEUE)


def _serve(ready: Any, stop: Any) -> None:
    """moto's server (patched as in local mode) in this process until ``stop`` is set."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line a request otherwise
    from moto.server import ThreadedMotoServer  # noqa: PLC0415

    from stepcrawl.emulator.moto_patches import apply_moto_patches  # noqa: PLC0415

    apply_moto_patches()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    ready.put(f"http://{host}:{port}")
    stop.wait()
    server.stop()


def _timed(run: Callable[..., object], args: tuple[Any, ...], invocations: int) -> float:
    started = time.perf_counter()
    run(*args)
    return invocations / (time.perf_counter() - started)


def _in_threads(endpoint: str, containers: int, each: int, tag: str) -> None:
    workers = [
        threading.Thread(target=_invocations, args=(endpoint, f"{tag}-{n}", each))
        for n in range(containers)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def _warm_pool(containers: int) -> Any:
    return multiprocessing.get_context("spawn").Pool(containers)


def measure(invocations: int, counts: list[int]) -> dict[str, dict[int, float]]:
    """Invocations per second by design and container count."""
    from multiprocessing.connection import Listener  # noqa: PLC0415

    from moto.server import ThreadedMotoServer  # noqa: PLC0415

    from stepcrawl.emulator.in_process import (  # noqa: PLC0415
        serve_in_process,
        stop_serving_in_process,
    )
    from stepcrawl.emulator.moto_patches import apply_moto_patches  # noqa: PLC0415

    designs = ("threads", "processes", "server-process", "processes-rpc")
    results: dict[str, dict[int, float]] = {design: {} for design in designs}
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    apply_moto_patches()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    _prepare(endpoint)
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Queue(), context.Event()
    own = context.Process(target=_serve, args=(ready, stop), daemon=True)
    own.start()
    apart = ready.get(timeout=120)
    _prepare(apart)
    listener = Listener(("127.0.0.1", 0), authkey=_AUTHKEY)
    address = listener.address
    threading.Thread(target=_rpc_serve, args=(listener,), daemon=True).start()
    try:
        for count in counts:
            each = max(1, invocations // count)
            total = each * count
            serve_in_process(int(port))
            try:
                results["threads"][count] = _timed(
                    _in_threads, (endpoint, count, each, f"t{count}"), total
                )
            finally:
                stop_serving_in_process(int(port))
            # Warm containers: the pool's processes start (a cold start each) before the clock.
            for design, where in (("processes", endpoint), ("server-process", apart)):
                with _warm_pool(count) as pool:
                    warm = [(where, f"w{design}{count}-{n}", 1) for n in range(count)]
                    pool.starmap(_invocations, warm)
                    jobs = [(where, f"{design}{count}-{n}", each) for n in range(count)]
                    results[design][count] = _timed(pool.starmap, (_invocations, jobs), total)
            with _warm_pool(count) as pool:
                warm_rpc = [(address, endpoint, f"wrpc{count}-{n}", 1) for n in range(count)]
                pool.starmap(_rpc_invocations, warm_rpc)
                rpc = [(address, endpoint, f"rpc{count}-{n}", each) for n in range(count)]
                results["processes-rpc"][count] = _timed(
                    pool.starmap, (_rpc_invocations, rpc), total
                )
    finally:
        listener.close()
        stop.set()
        own.join(timeout=30)
        server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=240)
    parser.add_argument("--containers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    results = measure(args.invocations, args.containers)
    print("| containers | threads (today) | processes | server-process | processes-rpc |")
    print("|---:|---:|---:|---:|---:|")
    for count in args.containers:
        base = results["threads"][count]
        cells = [f"{base:.1f}/s"]
        for design in ("processes", "server-process", "processes-rpc"):
            value = results[design][count]
            cells.append(f"{value:.1f}/s ({value / base:.2f}x)")
        print(f"| {count} | " + " | ".join(cells) + " |")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
