"""Faster, equivalent paths through moto's DynamoDB, for local mode's speed.

Each patch here changes how long moto takes, never what it answers; each is proven against
moto's own behaviour in ``tests/integration/test_moto_fastpath.py``.

**Responses** (:func:`serializer_patches`). moto renders every response through its generic,
model-driven serialiser (``moto.core.serialize``). For DynamoDB that walks each
``AttributeValue`` as a structure of ten members (``S``, ``N``, ``B``, ``SS``... ``BOOL``)
and, for each member of each value, asks an attribute picker to try up to five aliases of the
member's name on the value: ~50 lookups to copy one ``{"S": "x"}``. A py-spy profile of a
local crawl put 23-29% of the function threads' time there, nearly all of it the items of
``Query``, ``GetItem`` and ``BatchGetItem`` answers (docs/performance.md, "Local mode against
Scrapy").

Here DynamoDB's JSON serialiser is moto's own, except for the shapes that hold attribute
values (``AttributeValue`` itself, and the maps and lists of them: ``AttributeMap``, ``Key``,
``ItemList``, ``BatchGetResponseMap``...), which are copied by a direct walk that gives what
moto's walk gives, value for value:

* ``S``, ``N``: the string as is (moto: ``str(value)`` of a ``str``); ``SS``, ``NS``: the list
  of them; ``B``, ``BS``: base64 text of the bytes (moto: ``_base64``); ``NULL``, ``BOOL``:
  the ``bool`` as is; ``M``, ``L``: member by member.
* An attribute value is a one-key ``dict`` whose key is one of those ten names: moto's picker
  finds exactly that member and no other (checked against moto's own picker, below, once).

Anything else (a value that is not a plain ``dict``/``list``/``str``/``bytes``/``bool`` of
that form, an empty attribute name, which moto serialises oddly, a ``None``) is handed to
moto's walk, for that whole subtree: the fast walk builds new objects and touches nothing, so
giving up half-way changes nothing. And the whole fast path stands aside when the handler
has response transformers or a non-default picker, or the botocore model's ``AttributeValue``
is not the one checked here: moto's walk then does everything, as before. The tests run the
same requests with and without it and compare the response bodies byte for byte.

**Update expressions** (:func:`update_expression_patches`): parsed once per distinct
expression, and their clause counts checked once (:func:`_parsed_once` says why that is safe).

**Tables** (:func:`table_patches`, proven in ``tests/integration/test_moto_patches.py``).
``TransactWriteItems`` deep-copied the whole table once per operation to be able to roll
back: O(table size) per transaction, which made a crawl of 900 pages spend a minute in
``deepcopy``; it snapshots only the items the transaction touches and restores those.
``Query`` on the table's key sorted the whole table and filtered it by partition; it reads the
one partition instead (same items, same order).
"""

from __future__ import annotations

import base64
import copy
import functools
import inspect
import types
from collections.abc import Callable, Mapping, MutableMapping
from contextvars import ContextVar
from typing import Any

from botocore.model import ListShape, MapShape, Shape
from moto.core import serialize as moto_serialize
from moto.core.model import Shape as MotoShape
from moto.core.model import StructureShape
from moto.core.serialize import (
    DEFAULT_ALIAS_PROVIDERS,
    AttributePickerContext,
    JSONSerializer,
    XFormedAttributePicker,
)
from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
from moto.dynamodb.parsing.validators import ActionCountValidator

__all__ = [
    "FastDynamoDBSerializer",
    "fastpath_patches",
    "serializer_patches",
    "table_patches",
    "update_expression_patches",
]

_Copy = Callable[[Any], Any]

#: The members of DynamoDB's ``AttributeValue``, with the type of their shape (and of their
#: list's member, or map's value).
_ATTRIBUTE_VALUE = {
    "S": ("string", None),
    "N": ("string", None),
    "B": ("blob", None),
    "SS": ("list", "string"),
    "NS": ("list", "string"),
    "BS": ("list", "blob"),
    "M": ("map", "AttributeValue"),
    "L": ("list", "AttributeValue"),
    "NULL": ("boolean", None),
    "BOOL": ("boolean", None),
}


class _FallbackError(Exception):
    """The fast walk met something it does not copy as moto would: moto's walk does it."""


def _base64(value: bytes | str) -> str:
    # moto's ResponseSerializer._base64 (utf-8 is its DEFAULT_ENCODING; b64 has no blanks to
    # strip).
    if isinstance(value, str):
        value = value.encode("utf-8")
    return base64.b64encode(value).decode("utf-8")


def _string(value: Any) -> str:
    if type(value) is not str:
        raise _FallbackError
    return value


def _blob(value: Any) -> str:
    if type(value) is not bytes and type(value) is not str:
        raise _FallbackError
    return _base64(value)


def _boolean(value: Any) -> bool:
    if type(value) is not bool:
        raise _FallbackError
    return value


def _strings(value: Any) -> list[str]:
    if type(value) is not list:
        raise _FallbackError
    return [_string(member) for member in value]


def _blobs(value: Any) -> list[str]:
    if type(value) is not list:
        raise _FallbackError
    return [_blob(member) for member in value]


def _attribute_map(value: Any) -> dict[Any, Any]:
    """A map of attribute values (an item, a key, an ``M``)."""
    if type(value) is not dict:
        raise _FallbackError
    out = {}
    for name, member in value.items():
        if not name:  # moto writes an empty name's value into the map itself
            raise _FallbackError
        out[name] = _attribute_value(member)
    return out


def _attribute_list(value: Any) -> list[Any]:
    if type(value) is not list:
        raise _FallbackError
    return [_attribute_value(member) for member in value]


#: How each member of an ``AttributeValue`` is copied (its shape's type in ``_ATTRIBUTE_VALUE``).
_MEMBER_COPIES: dict[str, _Copy] = {
    "S": _string,
    "N": _string,
    "B": _blob,
    "SS": _strings,
    "NS": _strings,
    "BS": _blobs,
    "M": _attribute_map,
    "L": _attribute_list,
    "NULL": _boolean,
    "BOOL": _boolean,
}


def _attribute_value(value: Any) -> dict[str, Any]:
    if type(value) is not dict or len(value) != 1:
        raise _FallbackError
    ((tag, member),) = value.items()
    copy = _MEMBER_COPIES.get(tag)
    if copy is None:
        raise _FallbackError
    return {tag: copy(member)}


def _list_of(copy: _Copy) -> _Copy:
    def copy_list(value: Any) -> list[Any]:
        if type(value) is not list:
            raise _FallbackError
        return [copy(member) for member in value]

    return copy_list


def _map_of(copy: _Copy) -> _Copy:
    def copy_map(value: Any) -> dict[Any, Any]:
        if type(value) is not dict:
            raise _FallbackError
        out = {}
        for name, member in value.items():
            if not name:
                raise _FallbackError
            out[name] = copy(member)
        return out

    return copy_map


def _renamed(shape: Shape) -> bool:
    return "name" in shape.serialization


def _checked_attribute_value(shape: StructureShape) -> bool:
    """Whether ``shape`` is the ``AttributeValue`` the fast walk copies, and moto's picker finds
    a member of a one-key dict under that key and no other."""
    members = shape.members
    if shape.is_document_type or members.keys() != _ATTRIBUTE_VALUE.keys():
        return False
    picker = XFormedAttributePicker()
    for name, member in members.items():
        kind, inner = _ATTRIBUTE_VALUE[name]
        if member.type_name != kind or _renamed(member):
            return False
        if isinstance(member, ListShape):
            element: Shape = member.member
        elif isinstance(member, MapShape):
            element = member.value
            if member.key.type_name != "string":
                return False
        else:
            element = member
        if inner is not None and (
            (element.name if inner == "AttributeValue" else element.type_name) != inner
            or _renamed(element)
        ):
            return False
        setattr(member, "parent", shape)  # noqa: B010 - as moto's walk sets it
        context = AttributePickerContext(obj={}, key=name, shape=member)
        tried = list(picker.get_possible_keys(context))
        # moto takes the first of these keys the dict has: with only member names as keys,
        # that must be this member's own name.
        if name not in tried or set(tried[: tried.index(name)]) & members.keys():
            return False
    return True


#: Fast copies by shape name (the names are unique within DynamoDB's model); None: moto's walk.
_COPIES: dict[str, _Copy | None] = {}


def _fast_copy(shape: Shape) -> _Copy | None:
    try:
        return _COPIES[shape.name]
    except KeyError:
        pass
    copy: _Copy | None = None
    if shape.name == "AttributeValue":
        if isinstance(shape, StructureShape) and _checked_attribute_value(shape):
            copy = _attribute_value
    elif isinstance(shape, ListShape):
        inner = _fast_copy(shape.member)
        if inner is not None and not _renamed(shape.member):
            copy = _list_of(inner)
    elif isinstance(shape, MapShape):
        inner = _fast_copy(shape.value)
        if inner is not None and not _renamed(shape.value) and shape.key.type_name == "string":
            copy = _map_of(inner)
    _COPIES[shape.name] = copy
    return copy


class FastDynamoDBSerializer(JSONSerializer):
    """moto's JSON serialiser, copying attribute values directly (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        picker = self._value_picker
        self._fast = (
            type(picker) is XFormedAttributePicker
            and not picker.response_transformers
            and picker.alias_providers is DEFAULT_ALIAS_PROVIDERS
        )

    def _serialize(
        self, serialized: MutableMapping[str, Any], value: Any, shape: MotoShape, key: str
    ) -> None:
        if self._fast and key:
            copy = _fast_copy(shape)
            if copy is not None:
                try:
                    # moto's structure, map and list walks all end so (_default_serialize).
                    serialized[shape.serialization.get("name", key)] = copy(value)
                    return
                except _FallbackError:
                    pass
        super()._serialize(serialized, value, shape, key)


def _with_dynamodb(
    serializers: Mapping[str, dict[str, type[moto_serialize.ResponseSerializer]]],
) -> dict[str, dict[str, type[moto_serialize.ResponseSerializer]]]:
    out = dict(serializers)
    out["dynamodb"] = {**out.get("dynamodb", {}), "json": FastDynamoDBSerializer}
    return out


def serializer_patches() -> list[tuple[object, str, Any]]:
    """DynamoDB's JSON responses through :class:`FastDynamoDBSerializer`."""
    return [
        (
            moto_serialize,
            "SERVICE_SPECIFIC_SERIALIZERS",
            _with_dynamodb(moto_serialize.SERVICE_SPECIFIC_SERIALIZERS),
        ),
    ]


# ---- update expressions: parsed once ---------------------------------------------------------

#: On the root of a cached update expression whose clause counts moto's ActionCountValidator
#: accepted (it reads the tree alone): the check need not run again on its copies.
_COUNTS_CHECKED = "_stepcrawl_counts_checked"


def _parsed_once(make: Callable[[str], Any]) -> Callable[[Any, str], Any]:
    """``UpdateExpressionParser.make``, answering the same tree for the same expression.

    moto parses an ``UpdateExpression`` twice a request (the handler, for the names it uses,
    then the backend) and a crawl sends the same few expressions over and over: parsing was
    ~3% of the function threads. Sharing one tree is safe because nothing changes it: the
    handler only reads it (``find_clauses``), and the backend hands it to
    ``UpdateExpressionValidator``, whose constructor validates and executes a deep copy
    (``Validator.__init__``: ``self.node_to_validate = deepcopy(expression)``). A parse that
    fails is not cached: it fails again, as it would have.

    And moto's ``ActionCountValidator`` (at most one SET, REMOVE, ADD clause) walks that copy
    once per nested clause, each walk over the rest of the tree: ~4% of the function threads.
    Its verdict depends on the tree alone, and it changes nothing (it hands back each node
    unchanged), so it runs once here, on a copy of the new tree, and a tree it accepts is
    marked; the deep copies carry the mark, and :func:`_counted_once` skips them. A tree it
    refuses is not marked: the refusal comes where it always did.
    """

    @functools.lru_cache(maxsize=1024)
    def parse(expression: str) -> Any:
        tree = make(expression)
        try:
            ActionCountValidator().traverse(copy.deepcopy(tree))
        except Exception:  # noqa: BLE001, S110 - raised again where moto checks it
            pass
        else:
            setattr(tree, _COUNTS_CHECKED, True)
        return tree

    @functools.wraps(make)
    def cached_make(cls: Any, expression_str: str) -> Any:
        if cls is not UpdateExpressionParser or type(expression_str) is not str:
            return make.__func__(cls, expression_str)  # type: ignore[attr-defined]
        return parse(expression_str)

    return cached_make


def _counted_once(traverse: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    @functools.wraps(traverse)
    def traverse_unless_checked(self: Any, node: Any) -> Any:
        if getattr(node, _COUNTS_CHECKED, False):
            return node
        return traverse(self, node)

    return traverse_unless_checked


def update_expression_patches() -> list[tuple[object, str, Any]]:
    """Update expressions parsed once, their clause counts checked once (:func:`_parsed_once`)."""
    return [
        (
            UpdateExpressionParser,
            "make",
            classmethod(_parsed_once(UpdateExpressionParser.make)),
        ),
        (ActionCountValidator, "traverse", _counted_once(ActionCountValidator.traverse)),
    ]


def fastpath_patches() -> list[tuple[object, str, Any]]:
    """The patches (owner, attribute, value) installing the fast paths."""
    return [*serializer_patches(), *update_expression_patches()]


# ---- tables: transactions and queries touch only their items --------------------------------

#: Inside a patched transaction, moto's whole-table backup copies are skipped.
_IN_TRANSACTION: ContextVar[bool] = ContextVar("stepcrawl_in_transaction", default=False)


def _deepcopy_unless_table(value: Any, memo: dict[int, Any] | None = None) -> Any:
    if isinstance(value, Table) and _IN_TRANSACTION.get():
        return value  # the patched transaction restores the items it touched instead
    return copy.deepcopy(value, memo)


def _touched(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[Any, Any, Any]]:
    """(table, hash key, range key) of every item a transaction names (that exists as a table)."""
    touched = []
    for entry in transact_items:
        op: dict[str, Any] = next(iter(entry.values()), {})
        table = backend.tables.get(op.get("TableName"))
        key = op.get("Key") or op.get("Item")
        if table is None or not isinstance(key, dict) or table.hash_key_attr not in key:
            continue  # moto raises the validation error itself
        range_value = key.get(table.range_key_attr) if table.range_key_attr else None
        if table.range_key_attr and range_value is None:
            continue  # likewise
        touched.append(
            (
                table,
                DynamoType(key[table.hash_key_attr]),
                DynamoType(range_value) if range_value is not None else None,
            )
        )
    return touched


def _item_level_rollback(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        # No lock of its own: the request lock (above) already excludes every other request.
        touched = _touched(self, transact_items)
        before = [(t, h, r, copy.deepcopy(t.get_item(h, r))) for t, h, r in touched]
        flag = _IN_TRANSACTION.set(True)
        try:
            original(self, transact_items)
        except Exception:
            for table, h, r, item in reversed(before):
                table.delete_item(h, r)
                if item is not None:
                    if r is not None:
                        table.items[h][r] = item
                    else:
                        table.items[h] = item
            raise
        finally:
            _IN_TRANSACTION.reset(flag)

    return transact_write_items


#: Set while a patched ``Table.query`` runs without an index: the partition it reads.
_QUERY_PARTITION: ContextVar[Any] = ContextVar("stepcrawl_query_partition", default=None)


def _partition_query(original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, hash_key, *args, **kwargs)
        if bound.arguments.get("index_name") or hash_key is None:
            return original(self, hash_key, *args, **kwargs)
        flag = _QUERY_PARTITION.set(hash_key)
        try:
            return original(self, hash_key, *args, **kwargs)
        finally:
            _QUERY_PARTITION.reset(flag)

    return query


def _partition_items(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def all_items(self: Any) -> Any:
        partition = _QUERY_PARTITION.get()
        if partition is None:
            return original(self)
        found = self.items.get(partition)
        if found is None:
            return []
        return sorted(found.values(), key=lambda i: i.range_key) if self.range_key_attr else [found]

    return all_items


def table_patches() -> list[tuple[object, str, Any]]:
    """Transactions rolled back item by item, table queries reading their one partition."""
    return [
        (
            DynamoDBBackend,
            "transact_write_items",
            _item_level_rollback(DynamoDBBackend.transact_write_items),
        ),
        (Table, "query", _partition_query(Table.query)),
        (Table, "all_items", _partition_items(Table.all_items)),
        (
            dynamodb_models,
            "copy",
            types.SimpleNamespace(deepcopy=_deepcopy_unless_table, copy=copy.copy),
        ),
    ]
