"""The base of manifest.json's records (:mod:`cudnn_port.manifest`, :mod:`cudnn_port.manifest_records`): a
dataclass whose fields are the keys of its JSON form, in the order they are written; ``to_dict`` gives that form back
key for key.

    @dataclasses.dataclass(kw_only=True, eq=False)
    class ParityRecord(Record):
        passed: bool
        judge: str
        extra: Dict[str, Any] = extra_field()

Building one (its constructor, ``record["key"] = value``, :meth:`Record.record`, :meth:`Record.of`) takes a nested
record or its JSON form (a dict, a list of dicts) and refuses a key the record does not declare (KeyError, naming the
record); a field declared with :func:`road_field` is absent from the JSON until it is set. Reading a manifest
(:meth:`Record.from_dict`) carries a key this version does not know (a newer cudnn-port's) in ``extra``, written back
unchanged. ``record["key"]`` / ``.get`` / ``.setdefault`` / ``in`` / ``==`` with a dict answer by JSON key, for users
of the JSON form.
"""
import dataclasses
import typing
from typing import (TYPE_CHECKING, Any, ClassVar, Dict, Iterable, Iterator, List, Type, TypeVar,
                    Union)


def road_field() -> Any:
    """A field that one road sets: None (absent from the JSON and from ``in``) until it does."""
    return dataclasses.field(default=None, metadata={"road": True})


def extra_field() -> Any:
    """A record's ``extra``: the keys of its JSON form this version does not declare (empty, left out of repr)."""
    return dataclasses.field(default_factory=dict, repr=False)


_R = TypeVar("_R", bound="Record")


class Record:
    """Dict-style access by JSON key: a declared field, else an entry of ``extra``."""

    if TYPE_CHECKING:  # what every record (a dataclass with an ``extra`` field) has
        __dataclass_fields__: ClassVar[Dict[str, Any]]
        extra: Dict[str, Any]

        def __init__(self, **fields: Any) -> None: ...

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for name in self._fields():  # nested JSON forms (dicts, lists of dicts) built into their records
            object.__setattr__(self, name, _build(hints[name], getattr(self, name), strict=True))

    def __eq__(self, other: object) -> bool:
        """Equal to a record or a dict of the same JSON form (what users of the JSON form compare with)."""
        if isinstance(other, Record):
            other = other.to_dict()
        return isinstance(other, dict) and self.to_dict() == other

    __hash__ = None  # type: ignore[assignment]  # mutable, as dicts are

    def _fields(self) -> List[str]:
        return [f.name for f in dataclasses.fields(self) if f.name != "extra"]

    def _present(self, name: str) -> bool:
        """Whether field ``name`` is in the JSON form: always, but for a road field its road has not set."""
        field = next(f for f in dataclasses.fields(self) if f.name == name)
        return getattr(self, name) is not None or not field.metadata.get("road")

    def __getitem__(self, key: str) -> Any:
        if key in self._fields():
            if not self._present(key):
                raise KeyError(key)
            return getattr(self, key)
        return self.extra[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self._fields():  # what the code writes is declared: extra only carries what it reads unknown
            raise KeyError(f"{key!r} is not a field of {type(self).__name__}; declare it in "
                           "cudnn_port/manifest.py or cudnn_port/manifest_records.py")
        setattr(self, key, _build(_hints(type(self))[key], value, strict=True))

    def __contains__(self, key: str) -> bool:
        return (key in self._fields() and self._present(key)) or key in self.extra

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def setdefault(self, key: str, default: Any) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, **items: Any) -> None:
        for key, value in items.items():
            self[key] = value

    def record(self, details: Dict[str, Any], own: Iterable[str] = ()) -> None:
        """Merge what a format's writer returns: this record's fields into their fields, the keys the format declares
        its own (``own``: :attr:`cudnn_port.formats.Format.records`, a format defined outside this package) into
        ``extra``, written back as they are; any other key is refused (KeyError), before anything is merged."""
        own = set(own)
        unknown = [key for key in details if key not in own and key not in self._fields()]
        if unknown:
            raise KeyError(f"{unknown[0]!r} is not a field of {type(self).__name__} nor a key its format declares; "
                           "declare it in cudnn_port/manifest.py, or in the format's records=")
        for key, value in details.items():
            if key in own and key not in self._fields():
                self.extra[key] = value
            else:
                self[key] = value

    def keys(self) -> Iterator[str]:
        return iter(self.to_dict())

    def to_dict(self) -> Dict[str, Any]:
        """The JSON form: the fields (records nested as dicts), then the extras."""
        out = {name: _plain(getattr(self, name)) for name in self._fields() if self._present(name)}
        out.update({key: _plain(value) for key, value in self.extra.items()})
        return out

    @classmethod
    def of(cls: Type[_R], data: Dict[str, Any]) -> _R:
        """The record of a JSON form the code builds: a key the record does not declare is refused (KeyError)."""
        built: _R = _build(cls, data, strict=True)
        return built

    @classmethod
    def from_dict(cls: Type[_R], data: Dict[str, Any]) -> _R:
        """The record of a JSON form as a manifest holds it; a key this version does not know goes to ``extra``."""
        built: _R = _build(cls, data, strict=False)
        return built


_HINTS: Dict[type, Dict[str, Any]] = {}


def _hints(cls: type) -> Dict[str, Any]:
    """The field types of record class ``cls`` (read once)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _build(hint: Any, value: Any, strict: bool) -> Any:
    """``value`` as the field type ``hint`` holds it: a dict where a record is declared built into it (``strict``:
    an undeclared key refused; else carried in ``extra``; anything but a dict there: TypeError), a list's items and a
    dict's values likewise; anything else as it is."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and issubclass(hint, Record) and not isinstance(value, (dict, hint)):
        raise TypeError(f"{hint.__name__} is built from a dict, not {type(value).__name__}")
    if isinstance(hint, type) and issubclass(hint, Record) and isinstance(value, dict):
        names = [f.name for f in dataclasses.fields(hint) if f.name != "extra"]
        unknown = [key for key in value if key not in names]
        if strict and unknown:
            raise KeyError(f"{unknown[0]!r} is not a field of {hint.__name__}; declare it in "
                           "cudnn_port/manifest_records.py")
        hints = _hints(hint)
        return hint(**{k: _build(hints[k], v, strict) for k, v in value.items() if k in names},
                    extra={k: value[k] for k in unknown})
    if origin is Union:
        inner = [a for a in args if a is not type(None)]
        return value if value is None or len(inner) != 1 else _build(inner[0], value, strict)
    if origin is list and isinstance(value, list):  # the same list where no item changes (code appends to it)
        items = [_build(args[0], v, strict) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    if origin is tuple and isinstance(value, list):
        return tuple(value)
    if origin is dict and isinstance(value, dict) and args:
        entries = {k: _build(args[1], v, strict) for k, v in value.items()}
        return value if all(entries[k] is v for k, v in value.items()) else entries
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
