"""The Scrapy baseline of bench/vs_scrapy.py: the demo pipeline's crawl task, in Scrapy.

Scrapy's default settings except CONCURRENT_REQUESTS=64 and CONCURRENT_REQUESTS_PER_DOMAIN=64;
robots.txt obeyed, no delay, the same link rule (every a[href] but /calendar/, depth <= 5, on
127.0.0.1) and the same six fields on product pages. Prints one JSON line: pages, items,
seconds (from the first request to the last response) and pages per second.

    python bench/scrapy_shop.py http://127.0.0.1:PORT/ ITEMS.jsonl
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor

PRODUCT = re.compile(r"/product/[0-9a-f]{16}\.html$")


class ShopSpider(scrapy.Spider):
    name = "shop"
    allowed_domains = ("127.0.0.1",)
    links = LinkExtractor(deny=[r"/calendar/"])
    pages = 0
    first = last = 0.0

    def __init__(self, seed: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [seed]

    def parse(self, response: Any) -> Any:
        ShopSpider.pages += 1
        ShopSpider.last = time.perf_counter()
        if PRODUCT.search(response.url):
            for page in response.css("article.product_page"):
                yield {
                    "sku": page.css("[itemprop=sku]::text").get(),
                    "name": page.css("h1::text").get(),
                    "price": page.css("p.price::text").re_first(r"(\d+\.\d{2})"),
                    "stock": page.css("p.availability::text").re_first(r"\((\d+) available\)"),
                    "rating": page.css("p.star-rating::attr(class)").re_first(r"star-rating (\w+)"),
                    "category": page.css("[itemprop=category]::text").get(),
                }
        for link in self.links.extract_links(response):
            yield response.follow(link.url, callback=self.parse)


def main() -> None:
    seed, items_path = sys.argv[1], sys.argv[2]
    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": 64,
            "CONCURRENT_REQUESTS_PER_DOMAIN": 64,
            "ROBOTSTXT_OBEY": True,
            "DEPTH_LIMIT": 5,
            "LOG_LEVEL": "WARNING",
            "FEEDS": {items_path: {"format": "jsonlines", "overwrite": True}},
        }
    )
    process.crawl(ShopSpider, seed=seed)
    started = time.perf_counter()
    process.start()
    seconds = ShopSpider.last - started
    items = sum(1 for _ in open(items_path, encoding="utf-8"))  # noqa: SIM115, PTH123
    print(
        json.dumps(
            {
                "pages": ShopSpider.pages,
                "items": items,
                "seconds": round(seconds, 3),
                "pages_per_second": round(ShopSpider.pages / seconds, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
