"""The extraction engine of the parse step: page bytes -> items and links to follow.

::

    parse_page(body, content_type, url, task)     decode + parse once + both below
    ├── decode_body(body, content_type)            charset.py: header, BOM, <meta>
    ├── extract_items(tree, url, task.extract)     items.py + fields.py + coerce.py
    └── extract_links(tree, url, task.follow, ..)  links.py + urls.py

Rules are compiled (regexes, converters) once per rule object and cached by identity.
"""

from __future__ import annotations

from stepcrawl.extract.charset import decode_body
from stepcrawl.extract.coerce import CoercionError, FieldType, coerce
from stepcrawl.extract.items import ExtractResult, extract_items
from stepcrawl.extract.links import canonical_url, extract_links, url_host
from stepcrawl.extract.page import ParsedPage, default_allowed_domains, parse_page

__all__ = [
    "CoercionError",
    "ExtractResult",
    "FieldType",
    "ParsedPage",
    "canonical_url",
    "coerce",
    "decode_body",
    "default_allowed_domains",
    "extract_items",
    "extract_links",
    "parse_page",
    "url_host",
]
