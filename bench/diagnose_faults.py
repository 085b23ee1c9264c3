"""How well `stepcrawl diagnose` names what went wrong, and how soon an alert says so.

A fault catalogue (issue 29): kinds of fault injected into small generated sites on 127.0.0.1,
several variants each (another host, another share of the pages), each with its true cause
written down before the run. Every variant is a pipeline of its own deployed into one local
cloud (the lost-message variants each get a cloud of their own: the runtime loses the first
fetch message it receives), crawled once, then:

- **diagnosis**: ``diagnose``'s suspects (:mod:`stepcrawl.diagnose.suspects`) from the run as
  a deployed stack's is read (:func:`stepcrawl.diagnose.sources.from_deployment`); top-1 and
  top-3 say whether the first, or one of the first three, is the true cause;
- **alert**: the first FIRING message naming the variant's pipeline that the real notifier
  posted to a Slack-format receiver on 127.0.0.1 (the failed run's, a data-quality check's,
  one of the pipeline's alarms; a stack-wide alarm cannot be told apart between variants, so
  it is not counted), and how long after the fault began (the run's start), also in the
  stack's alarm periods (5 minutes deployed; the local cloud plays a deployed minute in a
  second).

    .venv/bin/python bench/diagnose_faults.py [--kinds http_503,dead_host] [--variants 2]

Prints a table per fault kind and the totals; ``--json`` writes every variant's result.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.receiver import Receiver, running_receiver  # noqa: E402

from stepcrawl.alerts import reset_providers  # noqa: E402
from stepcrawl.diagnose import diagnose  # noqa: E402
from stepcrawl.diagnose.sources import from_deployment  # noqa: E402
from stepcrawl.emulator.alarms import alert_secret_name, store_alert_channels  # noqa: E402
from stepcrawl.emulator.lambda_runtime import Chaos  # noqa: E402
from stepcrawl.local.cloud import LOCAL_STAGE, LocalCloud, synthesize  # noqa: E402
from stepcrawl.local.runner import staged_pipelines  # noqa: E402
from stepcrawl.pipeline import Pipeline  # noqa: E402

__all__ = ["FAULTS", "main"]

#: The stack's alarm period, deployed (seconds); the local cloud plays a minute in a second.
ALARM_PERIOD = 300
LOCAL_SCALE = 60
#: ``CrawlConfig.stall_after`` (180 s deployed) on the local clock.
STALL_AFTER = 180 / LOCAL_SCALE
PRODUCTS = 12  # product pages on the main host
RUN_TIMEOUT = 240.0


# ---- the site ------------------------------------------------------------------------------


#: The main host; per variant, a faulty one and one with nothing listening, each another
#: loopback address (Linux routes 127.0.0.0/8 to lo, so the engine sees other hosts, whose
#: breakers no other variant touched); a name that does not resolve.
MAIN_IP = "127.0.0.1"
UNRESOLVABLE = "shop-{n}.localhost"
_SEQUENCE = iter(range(1, 250))


@dataclass(frozen=True)
class Place:
    """A variant's own hosts: the faulty one, one with nothing listening (on ``dead_port``),
    a name that does not resolve."""

    faulty: str
    dead: str
    dead_port: int
    unresolvable: str

    @classmethod
    def new(cls) -> Place:
        n = next(_SEQUENCE)
        dead = f"127.0.{n}.3"
        with socket.socket() as probe:  # a port nothing takes on the dead host's address
            probe.bind((dead, 0))
            port = int(probe.getsockname()[1])
        return cls(f"127.0.{n}.2", dead, port, UNRESOLVABLE.format(n=n))

    def host(self, which: str) -> str:
        return {"faulty": self.faulty, "dead": self.dead, "dns": self.unresolvable}[which]


@dataclass
class Host:
    """One host (an address on the loopback) and how it answers."""

    answer: Callable[[str], tuple[int, dict[str, str], bytes] | None]
    ip: str = MAIN_IP
    port: int = 0
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}"


def _serve(host: Host) -> Host:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answered = host.answer(self.path)
            if answered is None:  # the fault is to answer nothing useful: cut the connection
                self.close_connection = True
                return
            status, headers, body = answered
            self.send_response(status)
            for name, value in {"Content-Type": "text/html; charset=utf-8", **headers}.items():
                self.send_header(name, value)
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host.ip, host.port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    host.server, host.port = server, int(server.server_address[1])
    return host


def _page(title: str, body: str) -> bytes:
    return f"<html><head><title>{title}</title></head><body>{body}</body></html>".encode()


def product(n: int, *, price_class: str = "price", price: str | None = None) -> bytes:
    shown = price if price is not None else f"{10 + n}.50"
    return _page(
        f"product {n}",
        f'<article class="product"><h1>Product {n}</h1>'
        f'<p class="sku">sku-{n:04d}</p><p class="{price_class}">{shown}</p></article>',
    )


ROBOTS_OPEN = b"User-agent: *\nAllow: /\n"


@dataclass
class Fault:
    """One fault kind: how it changes the site, and what diagnose should name."""

    kind: str
    description: str
    #: (variant) -> (the main host's extra links, answer of the faulty host or None)
    build: Callable[[int], tuple[list[str], Callable[[str], Any] | None]]
    #: the variant's hosts -> the true cause: (suspect kind, a pattern the suspect's subject
    #: must match)
    truth: Callable[[Place], tuple[str, str]]
    #: the product pages' answer on the main host (a markup or format change)
    main_product: Callable[[int, int], bytes] = lambda _v, n: product(n)
    lose_first_fetch: bool = False
    #: the task's ``proxy`` (variant, its hosts, its faulty host's URL) -> a proxy URL, or None
    proxy: Callable[[int, Place, str | None], str | None] = lambda _v, _p, _f: None


def _bad_links(variant: int) -> int:
    """How many URLs a variant's fault touches: a quarter, then half of the products."""
    return (PRODUCTS // 4) * (variant + 1)


def _faulty_host(
    status: int, headers: dict[str, str] | None = None
) -> Callable[[int], tuple[list[str], Callable[[str], Any]]]:
    def build(variant: int) -> tuple[list[str], Callable[[str], Any]]:
        def answer(path: str) -> Any:
            if path == "/robots.txt":
                return 200, {"Content-Type": "text/plain"}, ROBOTS_OPEN
            return status, headers or {}, _page("error", f"error {status}")

        return [f"/item/{i}.html" for i in range(_bad_links(variant))], answer

    return build


def _other(kind: str, where: str = "faulty") -> Callable[[Place], tuple[str, str]]:
    """The true cause: failures of the variant's host with a reason matching ``kind``."""
    return lambda place: ("failures", rf"^{re.escape(place.host(where))} {kind}$")


def _body_fault(
    answer_of: Callable[[str], Any],
) -> Callable[[int], tuple[list[str], Callable[[str], Any]]]:
    def build(variant: int) -> tuple[list[str], Callable[[str], Any]]:
        def answer(path: str) -> Any:
            if path == "/robots.txt":
                return 200, {"Content-Type": "text/plain"}, ROBOTS_OPEN
            return answer_of(path)

        return [f"/item/{i}.html" for i in range(_bad_links(variant))], answer

    return build


def _robots_disallow(variant: int) -> tuple[list[str], Callable[[str], Any]]:
    def answer(path: str) -> Any:
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, b"User-agent: *\nDisallow: /item/\n"
        return 200, {}, product(99)

    return [f"/item/{i}.html" for i in range(_bad_links(variant))], answer


def _no_extra(_variant: int) -> tuple[list[str], None]:
    return [], None


def _dead(variant: int) -> tuple[list[str], None]:
    return [f"DEAD/item/{i}.html" for i in range(_bad_links(variant))], None


def _unresolvable(variant: int) -> tuple[list[str], None]:
    return [f"DNS/item/{i}.html" for i in range(_bad_links(variant))], None


def _refusing_proxy(variant: int) -> tuple[list[str], Callable[[str], Any] | None]:
    """Variant 0: the proxy's address has nothing listening; 1: it wants credentials the
    task does not have (407 to every request, as a proxy whose password rotated away)."""
    if variant == 0:
        return [], None
    return [], lambda _path: (407, {"Proxy-Authenticate": 'Basic realm="proxy"'}, b"")


def _proxy_of(variant: int, place: Place, faulty: str | None) -> str | None:
    return faulty if variant else f"http://{place.dead}:{place.dead_port}"


def _every(variant: int) -> int:
    return 3 if variant == 0 else 2


FAULTS: tuple[Fault, ...] = (
    Fault(
        "http_503", "a second host answers 503 to every page", _faulty_host(503), _other("http_503")
    ),
    Fault(
        "http_500", "a second host answers 500 to every page", _faulty_host(500), _other("http_500")
    ),
    Fault(
        "throttle_429",
        "a 429 storm with Retry-After: 1 from a second host",
        _faulty_host(429, {"Retry-After": "1"}),
        _other("http_429"),
    ),
    Fault(
        "dead_host",
        "a second host has nothing listening",
        _dead,
        _other("connect_error", "dead"),
    ),
    Fault(
        "dns_failure",
        "links to a host name that does not resolve",
        _unresolvable,
        _other("dns_error", "dns"),
    ),
    Fault(
        "not_found",
        "links to pages the second host does not have (404)",
        _faulty_host(404),
        _other("http_404"),
    ),
    Fault(
        "redirect_loop",
        "a second host redirects every page to itself",
        _body_fault(lambda path: (302, {"Location": path}, b"")),
        _other("(redirect_loop|too_many_redirects)"),
    ),
    Fault(
        "truncated",
        "a second host cuts its responses short (Content-Length longer than the body)",
        _body_fault(lambda _p: (200, {"Content-Length": "20000"}, product(1)[:60])),
        _other("(read|protocol|transport)_error"),
    ),
    Fault(
        "too_large",
        "a second host's pages exceed max_bytes_per_page",
        _body_fault(lambda _p: (200, {}, product(1) + b"<!--" + b"x" * 300_000 + b"-->")),
        _other("too_large"),
    ),
    Fault(
        "robots_disallow",
        "a second host's robots.txt newly disallows the section linked",
        _robots_disallow,
        _other("robots_disallowed"),
    ),
    Fault(
        "selector_broken",
        "a markup change: the price's class renamed on a share of the product pages",
        _no_extra,
        lambda _place: ("data_quality", "price"),
        main_product=lambda v, n: product(n, price_class="cost" if n % _every(v) == 0 else "price"),
    ),
    Fault(
        "format_changed",
        "a format change: prices written 12,50 EUR on a share of the product pages",
        _no_extra,
        lambda _place: ("data_quality", "price"),
        main_product=lambda v, n: product(
            n, price=f"{10 + n},50 EUR" if n % _every(v) == 0 else None
        ),
    ),
    Fault(
        "proxy_refusing",
        "the task's proxy refuses: nothing listening, or credentials wanted (407)",
        _refusing_proxy,
        lambda _place: ("failures", rf"^{re.escape(MAIN_IP)} proxy_(error|auth)$"),
        proxy=_proxy_of,
    ),
    Fault(
        "lost_in_flight",
        "a fetch message lost between the queues (nothing fetches its URL)",
        _no_extra,
        lambda _place: ("lost_in_flight", "crawl"),
        lose_first_fetch=True,
    ),
)


def _main_host(fault: Fault, variant: int, faulty: Host | None, place: Place) -> Host:
    extra, _ = fault.build(variant)

    def links() -> str:
        own = "".join(f'<a href="/product/{n}.html">p{n}</a>' for n in range(PRODUCTS))
        other = ""
        for path in extra:
            if path.startswith("DEAD"):
                other += f'<a href="http://{place.dead}:{place.dead_port}{path[4:]}">x</a>'
            elif path.startswith("DNS"):
                other += f'<a href="http://{place.unresolvable}{path[3:]}">x</a>'
            elif faulty is not None:
                other += f'<a href="{faulty.url}{path}">x</a>'
        return own + other

    def answer(path: str) -> Any:
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, ROBOTS_OPEN
        if path == "/":
            return 200, {}, _page("home", links())
        if path.startswith("/product/") and path.endswith(".html"):
            n = int(path.removeprefix("/product/").removesuffix(".html"))
            return 200, {}, fault.main_product(variant, n)
        return 404, {}, _page("missing", "not here")

    return _serve(Host(answer))


# ---- one variant -----------------------------------------------------------------------------


@dataclass
class Variant:
    fault: Fault
    number: int
    main: Host
    faulty: Host | None
    pipeline: Pipeline
    truth: tuple[str, str] = ("", "")

    @property
    def name(self) -> str:
        return self.pipeline.name


@dataclass
class Result:
    kind: str
    variant: int
    truth: str
    status: str = ""
    suspects: list[str] = field(default_factory=list)
    top1: bool = False
    top3: bool = False
    alert: str | None = None
    alert_after_s: float | None = None
    seconds: float = 0.0
    #: a stall alert for a variant whose URLs were not lost: a false one
    false_stall: bool = False

    @property
    def alert_periods(self) -> float | None:
        if self.alert_after_s is None:
            return None
        return round(self.alert_after_s * LOCAL_SCALE / ALARM_PERIOD, 2)


def _pipeline(name: str, main: Host, place: Place, proxy: str | None = None) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": name,
            "tasks": [
                {
                    **({"proxy": proxy} if proxy else {}),
                    "id": "crawl",
                    "type": "crawl",
                    "seeds": [main.url + "/"],
                    "allowed_domains": [MAIN_IP, place.faulty, place.dead, place.unresolvable],
                    "allow_private_network": True,
                    "timeout": "40s",
                    "retry": {"max_attempts": 2, "base_delay": "100ms", "max_delay": "200ms"},
                    "politeness": {"delay": 0, "obey_robots": True, "give_up_after": 1},
                    "limits": {
                        "max_depth": 2,
                        "max_error_ratio": 0.05,
                        "max_bytes_per_page": "64KB",
                    },
                    "follow": [{"selector": "a[href]"}],
                    "extract": [
                        {
                            "name": "product",
                            "container": "article.product",
                            "fields": {
                                "name": "h1",
                                "sku": "p.sku",
                                "price": {"selector": "p.price", "regex": r"(\d+\.\d{2})"},
                            },
                        }
                    ],
                    "monitors": {"field_coverage": {"price": ">= 0.95", "name": ">= 0.95"}},
                }
            ],
        }
    )


def _variant(fault: Fault, number: int) -> Variant:
    _, answer = fault.build(number)
    place = Place.new()
    faulty = _serve(Host(answer, place.faulty)) if answer is not None else None
    main = _main_host(fault, number, faulty, place)
    name = f"fault-{fault.kind.replace('_', '-')}-{number}"
    proxy = fault.proxy(number, place, faulty.url if faulty is not None else None)
    variant = Variant(fault, number, main, faulty, _pipeline(name, main, place, proxy))
    variant.truth = fault.truth(place)
    return variant


def _matches(suspect: Any, truth: tuple[str, str]) -> bool:
    kind, pattern = truth
    return bool(suspect.kind == kind and re.search(pattern, suspect.subject))


def _judge(cloud: LocalCloud, variant: Variant, receiver: Receiver, run: str) -> Result:
    assert cloud.deployment is not None
    posted = len(receiver.posts)
    started = time.monotonic()
    status = cloud.run(variant.name, run, timeout=RUN_TIMEOUT)
    ended = time.monotonic()
    found = diagnose(from_deployment(cloud.deployment, run))
    result = Result(
        variant.fault.kind,
        variant.number,
        " ".join(variant.truth),
        status=status.status,
        suspects=[f"{s.kind}: {s.subject} ({s.score:.0%})" for s in found.suspects[:3]],
        top1=bool(found.suspects) and _matches(found.suspects[0], variant.truth),
        top3=any(_matches(s, variant.truth) for s in found.suspects[:3]),
        seconds=round(ended - started, 1),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the alert may follow the run's end
        with receiver.lock:
            # This variant's: a post naming its pipeline (its failed run, its data-quality
            # checks, its pipeline's alarms); a stack-wide alarm cannot be told apart.
            fresh = [
                (t, p)
                for t, p in receiver.posts[posted:]
                if "[FIRING]" in str(p["text"]) and variant.name in str(p["text"])
            ]
        if fresh:
            at, post = fresh[0]
            result.alert = str(post["text"])[:120]
            result.alert_after_s = round(max(0.0, at - started), 1)
            break
        time.sleep(0.5)
    # Only a lost message may make a task stall: any other stall alert is a false one.
    with receiver.lock:
        texts = [str(p["text"]) for _, p in receiver.posts[posted:]]
    stalled = [t for t in texts if variant.name in t and "stalled:" in t]
    result.false_stall = bool(stalled) and not variant.fault.lose_first_fetch
    return result


@contextlib.contextmanager
def _cloud(
    pipelines: list[Pipeline], receiver: Receiver, tmp: Path, chaos: Chaos | None
) -> Iterator[LocalCloud]:
    secret = alert_secret_name(LOCAL_STAGE)
    with staged_pipelines([(p, None) for p in pipelines]) as directory:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # The stall watch's threshold on the local clock (180 s deployed), with a sweep
            # every local minute (a second), as the alarms are played.
            template = synthesize(
                directory, alert_secrets=[secret], settings={"stall_after": STALL_AFTER}
            )
        with LocalCloud(
            template, directory, log_path=tmp / "functions.log", chaos=chaos, sweep_every=1.0
        ) as cloud:
            channel = {"type": "slack", "url": f"http://127.0.0.1:{receiver.port}/slack"}
            store_alert_channels(
                cloud.emulator.client("secretsmanager"), secret, json.dumps(channel)
            )
            yield cloud


def run_catalogue(kinds: list[str], variants: int, tmp: Path) -> list[Result]:
    faults = [f for f in FAULTS if not kinds or f.kind in kinds]
    built = [_variant(f, n) for f in faults for n in range(variants)]
    results: list[Result] = []
    reset_providers()
    with running_receiver() as receiver:
        shared = [v for v in built if not v.fault.lose_first_fetch]
        if shared:
            with _cloud([v.pipeline for v in shared], receiver, tmp, None) as cloud:
                for variant in shared:
                    results.append(_judge(cloud, variant, receiver, f"{variant.name}-run"))
                    print(_line(results[-1]), flush=True)
        for variant in (v for v in built if v.fault.lose_first_fetch):
            reset_providers()
            with _cloud([variant.pipeline], receiver, tmp, Chaos(lose=("fetch",))) as cloud:
                results.append(_judge(cloud, variant, receiver, f"{variant.name}-run"))
                print(_line(results[-1]), flush=True)
    for variant in built:
        for host in (variant.main, variant.faulty):
            if host is not None and host.server is not None:
                host.server.shutdown()
                host.server.server_close()
    return results


def _line(r: Result) -> str:
    verdict = "top-1" if r.top1 else ("top-3" if r.top3 else "MISS")
    alert = f"alert +{r.alert_after_s}s ({r.alert_periods} periods)" if r.alert else "NO ALERT"
    return f"{r.kind}#{r.variant}: {r.status}, {verdict}, {alert}; suspects {r.suspects}"


def table(results: list[Result]) -> str:
    rows = ["| fault | variants | top-1 | top-3 | alerted | first alert, s (alarm periods) |"]
    rows.append("|---|---:|---:|---:|---:|---|")
    kinds = list(dict.fromkeys(r.kind for r in results))
    for kind in kinds:
        mine = [r for r in results if r.kind == kind]
        alerts = [r for r in mine if r.alert_after_s is not None]
        worst = max((r.alert_after_s for r in alerts), default=None)
        timing = (
            "-" if worst is None else f"{worst} ({round(worst * LOCAL_SCALE / ALARM_PERIOD, 1)})"
        )
        rows.append(
            f"| {kind} | {len(mine)} | {sum(r.top1 for r in mine)} | {sum(r.top3 for r in mine)} "
            f"| {len(alerts)} | {timing} |"
        )
    n = len(results)
    false_stalls = sum(r.false_stall for r in results)
    top1 = sum(r.top1 for r in results)
    top3 = sum(r.top3 for r in results)
    alerted = sum(r.alert is not None for r in results)
    rows.append(
        f"| **all** | {n} | {top1} ({top1 / max(1, n):.0%}) | {top3} ({top3 / max(1, n):.0%}) "
        f"| {alerted} ({alerted / max(1, n):.0%}) | |"
    )
    rows.append(f"\nfalse stall alerts (a task stalled with no message lost): {false_stalls}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="", help="comma-separated fault kinds (default: all)")
    parser.add_argument("--variants", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write every variant's result here")
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    started = time.monotonic()
    import tempfile  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        results = run_catalogue(kinds, args.variants, Path(tmp))
    print()
    print(table(results))
    print(f"\n{len(results)} runs in {time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
