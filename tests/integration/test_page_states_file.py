"""``stepcrawl run --state FILE`` on moto: a pipeline's page states (binary links included)
go to the file and back into a fresh table; other pipelines' states and other items stay
out, and expired states are not loaded."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import pytest

from stepcrawl.local.page_states import dump_states, restore_states
from stepcrawl.table_keys import page_state_key

from .conftest import Moto

pytestmark = pytest.mark.moto

NOW = 1_800_000_000.0


def state(pipeline: str, url: str, expires: float) -> dict[str, Any]:
    pk, sk = page_state_key(pipeline, "crawl", url)
    return {
        "pk": {"S": pk},
        "sk": {"S": sk},
        "fp": {"S": "f"},
        "at": {"N": str(NOW)},
        "expires_at": {"N": str(int(expires))},
        "links": {"B": zlib.compress(b"https://a.example/2")},
    }


def scan(client: Any, table: str) -> list[dict[str, Any]]:
    items = client.scan(TableName=table)["Items"]
    return sorted(items, key=lambda i: i["pk"]["S"])


def test_page_states_go_to_the_file_and_back(moto: Moto, tmp_path: Path) -> None:
    moto.table("first")
    moto.table("second")
    client = moto.client("dynamodb")
    mine = [state("shop", f"https://a.example/{n}", NOW + 86400) for n in range(30)]
    expired = state("shop", "https://a.example/old", NOW - 1)
    for item in [
        *mine,
        expired,
        state("other", "https://a.example/1", NOW + 86400),
        {"pk": {"S": "RUN#r"}, "sk": {"S": "TASK#crawl"}},
    ]:
        client.put_item(TableName="first", Item=item)
    path = tmp_path / "states" / "shop.jsonl"
    assert restore_states(client, "second", "shop", path, now=NOW) == 0  # no file yet
    assert dump_states(client, "first", "shop", path) == 31
    assert restore_states(client, "second", "shop", path, now=NOW) == 30
    assert scan(client, "second") == sorted(mine, key=lambda i: i["pk"]["S"])
    # Another pipeline's run reads none of them.
    assert restore_states(client, "second", "other", path, now=NOW) == 0
