"""The demo shop's catalogue: deterministic products, pure data (no HTML, no serving).

Everything derives from ``seed`` through string-seeded :class:`random.Random` instances (seeded
with SHA-512 of the string, stable across Python versions and platforms), one per product, so
changing one category's size never reshuffles another category.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from itertools import product as cartesian
from typing import Literal, TypedDict

__all__ = [
    "RATINGS",
    "Category",
    "Charset",
    "ExpectedItem",
    "Product",
    "Rating",
    "ShopModel",
]

Rating = Literal["one", "two", "three", "four", "five"]
RATINGS: tuple[Rating, ...] = ("one", "two", "three", "four", "five")

#: How a category's pages are encoded and where the site declares it.
Charset = Literal["utf-8", "iso-8859-1", "windows-1252"]


class ExpectedItem(TypedDict):
    """One item as a correct crawl of the demo shop delivers it after the transform."""

    sku: str
    title: str
    price: float
    stock: int
    rating: Rating
    category: str


@dataclass(frozen=True, slots=True)
class Product:
    sku: str
    title: str
    price: float
    currency: str
    stock: int
    rating: Rating
    category: str
    category_slug: str
    description: str

    @property
    def stars(self) -> int:
        """The rating as 1..5."""
        return RATINGS.index(self.rating) + 1

    def expected_item(self) -> ExpectedItem:
        return ExpectedItem(
            sku=self.sku,
            title=self.title,
            price=self.price,
            stock=self.stock,
            rating=self.rating,
            category=self.category,
        )


@dataclass(frozen=True, slots=True)
class Category:
    slug: str
    name: str
    charset: Charset
    #: True: ``Content-Type: text/html; charset=...``; False: only ``<meta charset>`` says it.
    charset_in_header: bool
    products: tuple[Product, ...]


@dataclass(frozen=True, slots=True)
class _Theme:
    slug: str
    name: str
    charset: Charset
    charset_in_header: bool
    heads: tuple[str, ...]
    tails: tuple[str, ...]
    price_pence: tuple[int, int]


# Titles are "head tail" pairs. The two non-UTF-8 themes use only characters of their charset,
# and Bistro's include œ and the curly apostrophe U+2019, which exist in windows-1252 but not in
# ISO-8859-1: a crawler that ignores the meta charset and guesses Latin-1 gets them wrong.
_THEMES: tuple[_Theme, ...] = (
    _Theme(
        "bakery",
        "Bakery",
        "utf-8",
        True,
        ("Rustic", "Seeded", "Sourdough", "Malted", "Golden", "Stone-baked"),
        ("Loaf", "Baguette", "Bloomer", "Focaccia", "Bagel", "Rye Roll"),
        (120, 900),
    ),
    _Theme(
        "tea-coffee",
        "Tea & Coffee",
        "utf-8",
        True,
        ("Assam", "Darjeeling", "Smoky", "Single-origin", "Decaf", "Jasmine"),
        ("Blend", "Leaf Tea", "Espresso", "Cold Brew", "Chai", "Filter Roast"),
        (250, 2400),
    ),
    _Theme(
        "patisserie",
        "Pâtisserie",
        "iso-8859-1",
        True,
        ("Crème brûlée", "Éclair", "Tarte Tatin", "Religieuse", "Madeleine", "Financier"),
        ("à la vanille", "au café", "à l'orange", "aux framboises", "au chocolat", "praliné"),
        (180, 1500),
    ),
    _Theme(
        "bistro",
        "Bistro Classics",
        "windows-1252",
        False,
        ("Bœuf bourguignon", "Coq au vin", "Soupe à l’oignon", "Croque-monsieur", "Œufs cocotte"),  # noqa: RUF001
        ("classique", "du chef", "maison", "à l’ancienne", "rustique", "de Lyon"),  # noqa: RUF001
        (650, 3200),
    ),
    _Theme(
        "pantry",
        "Pantry",
        "utf-8",
        True,
        ("Smoked", "Organic", "Spiced", "Wildflower", "Cold-pressed", "Aged"),
        ("Honey", "Olive Oil", "Sea Salt", "Paprika", "Balsamic", "Mustard"),
        (199, 1899),
    ),
    _Theme(
        "fromagerie",
        "Fromagerie",
        "utf-8",
        True,
        ("Gruyère", "Comté", "Époisses", "Manchego", "Jarlsberg", "Smørrebrød"),
        ("Réserve", "Jeune", "Fermier", "Extra-aged", "Truffled", "Smoked"),
        (300, 2800),
    ),
    _Theme(
        "hampers",
        "Gifts & Hampers",
        "utf-8",
        True,
        ("Weekend", "Festive", "Picnic", "Breakfast", "Deluxe", "Thank-you"),
        ("Hamper", "Gift Box", "Basket", "Tasting Set", "Crate", "Parcel"),
        (1500, 9999),
    ),
    _Theme(
        "cellar",
        "Cellar",
        "utf-8",
        True,
        ("Crisp", "Oaked", "Sparkling", "Dry", "Late-harvest", "Unfiltered"),
        ("Cider", "Perry", "Pale Ale", "Stout", "Riesling", "Rosé"),
        (350, 4500),
    ),
)

_BLURBS = (
    "Made in small batches by people who care.",
    "A customer favourite since the shop opened.",
    "Pairs well with a quiet afternoon.",
    "Sourced from independent producers.",
    "Keeps for weeks in a cool, dry place.",
    "Best enjoyed with friends.",
    "Limited stock: order while it lasts.",
)


class ShopModel:
    """A deterministic catalogue: ``categories`` categories of ``products_per_category`` each.

    ``page_size`` is how many products one listing page shows; the site uses it, and it is part
    of the model because the number of listing pages is a property of the shop tests compare.
    """

    MAX_CATEGORIES = len(_THEMES)

    def __init__(
        self,
        seed: int = 7,
        categories: int = 5,
        products_per_category: int = 23,
        page_size: int = 10,
    ) -> None:
        if not 1 <= categories <= self.MAX_CATEGORIES:
            raise ValueError(f"categories must be 1..{self.MAX_CATEGORIES}, got {categories}")
        if products_per_category < 1:
            raise ValueError(f"products_per_category must be >= 1, got {products_per_category}")
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.seed = seed
        self.products_per_category = products_per_category
        self.page_size = page_size
        self.categories: tuple[Category, ...] = tuple(
            _category(seed, theme, products_per_category) for theme in _THEMES[:categories]
        )
        self.products: tuple[Product, ...] = tuple(
            p for category in self.categories for p in category.products
        )
        self._by_sku = {p.sku: p for p in self.products}
        self._by_slug = {c.slug: c for c in self.categories}
        if len(self._by_sku) != len(self.products):
            # 64-bit hash prefixes: a collision is astronomically unlikely, never silent.
            raise ValueError(f"seed {seed} gives two products the same sku; pick another seed")

    def __repr__(self) -> str:
        return (
            f"ShopModel(seed={self.seed}, categories={len(self.categories)}, "
            f"products_per_category={self.products_per_category}, page_size={self.page_size})"
        )

    def category(self, slug: str) -> Category:
        return self._by_slug[slug]

    def product(self, sku: str) -> Product:
        return self._by_sku[sku]

    def has_product(self, sku: str) -> bool:
        return sku in self._by_sku

    def page_count(self, slug: str) -> int:
        """Listing pages of a category (numbered from 1)."""
        return math.ceil(len(self._by_slug[slug].products) / self.page_size)

    def listing(self, slug: str, page: int) -> tuple[Product, ...]:
        """The products on listing page ``page`` (1-based) of a category, in catalogue order."""
        if not 1 <= page <= self.page_count(slug):
            raise KeyError(f"{slug} has no page {page}")
        start = (page - 1) * self.page_size
        return self._by_slug[slug].products[start : start + self.page_size]

    def expected_items(self) -> list[ExpectedItem]:
        """Exactly the items a correct crawl of the site yields, in catalogue order.

        One per product (stepcrawl's own ``_``-prefixed fields are not part of them): compare
        with the crawl's items minus those fields, e.g. sorted by ``sku``.
        """
        return [p.expected_item() for p in self.products]


def _category(seed: int, theme: _Theme, count: int) -> Category:
    titles = _titles(seed, theme, count)
    products = tuple(_product(seed, theme, i, title) for i, title in enumerate(titles))
    return Category(theme.slug, theme.name, theme.charset, theme.charset_in_header, products)


def _titles(seed: int, theme: _Theme, count: int) -> list[str]:
    # Distinct within a category; past the head x tail combinations a numbered edition follows.
    pairs = [f"{head} {tail}" for head, tail in cartesian(theme.heads, theme.tails)]
    random.Random(f"stepcrawl-demo/{seed}/{theme.slug}/titles").shuffle(pairs)  # noqa: S311
    return [
        pairs[i % len(pairs)] + ("" if i < len(pairs) else f" No. {i // len(pairs) + 1}")
        for i in range(count)
    ]


def _product(seed: int, theme: _Theme, index: int, title: str) -> Product:
    key = f"stepcrawl-demo/{seed}/{theme.slug}/{index}"
    rng = random.Random(key)  # noqa: S311 (reproducible data, not secrets)
    low, high = theme.price_pence
    stock = 0 if rng.random() < 0.1 else rng.randint(1, 40)
    blurbs = rng.sample(_BLURBS, 2)
    return Product(
        sku=hashlib.sha256(key.encode()).hexdigest()[:16],
        title=title,
        # Whole pence divided once: the float equals float("12.34") of the rendered price.
        price=rng.randint(low, high) / 100,
        currency="GBP",
        stock=stock,
        rating=rng.choice(RATINGS),
        category=theme.name,
        category_slug=theme.slug,
        description=f"{title}, from our {theme.name} range. {blurbs[0]} {blurbs[1]}",
    )
