"""OUT/manifest.json: one typed record, read and written here and nowhere else.

    manifest = new_manifest(source, "name-based (TF1)", "names kept as they are", ["checkpoint", "onnx"], "tf1")
    manifest.stacks.append(StackRecord(variable="rnn/opaque_kernel", prefix="rnn", label="rnn", spec=spec.to_dict()))
    save_manifest(manifest, tmp)                          # hashes every file of tmp into manifest.files, writes it
    manifest = load_manifest(out)                         # checked to be ours, whole, of a version we read

Every road (stacks, whole model, rewritten graph) writes the same :class:`Manifest`. What only one road records (a
whole model's ``parity``, a graph's ``nodes``, a checkpoint's ``name_map``) is a typed field too, declared with
:func:`road_field`: None, and absent from the JSON and from ``in``, until that road sets it. ``extra`` keeps only keys
this version does not know (a manifest a newer cudnn-port wrote), and the details a format defined outside this
package declares as its own (``Format.records``) and records through :meth:`Manifest.record`, so that they are written
back unchanged; the code reads none, and setting or recording an undeclared key raises. The records also answer
``manifest["key"]`` / ``.get`` / ``.setdefault`` for the JSON key of a field, so that code and users reading the JSON
form see one set of names.

``manifest_version`` is this layout's number. A manifest without one (written before it existed: version 1, the same
keys) loads; a newer one is refused with one line (convert again with this version, or upgrade cudnn-port).
"""
import dataclasses
import datetime
import json
import os
from typing import (TYPE_CHECKING, Any, Callable, ClassVar, Dict, Iterable, Iterator, List, Optional, Sequence, Type,
                    TypeVar)

from ._version import __version__
from .errors import CudnnPortError
from .paths import require_file
from .source import ROADS

TOOL = "cudnn-port"
MANIFEST = "manifest.json"
MANIFEST_VERSION = 2  # 1: the untyped dict of cudnn-port <= 0.2.0 (same keys, no version field)


def road_field() -> Any:
    """A field that one road sets: None (absent from the JSON and from ``in``) until it does."""
    return dataclasses.field(default=None, metadata={"road": True})


_R = TypeVar("_R", bound="_Record")


class _Record:
    """Dict-style access by JSON key: a declared field, else an entry of ``extra``."""

    if TYPE_CHECKING:  # what every record (a dataclass with an ``extra`` field) has
        __dataclass_fields__: ClassVar[Dict[str, Any]]
        extra: Dict[str, Any]

        def __init__(self, **fields: Any) -> None: ...

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
            raise KeyError(f"{key!r} is not a field of {type(self).__name__}; declare it in cudnn_port/manifest.py")
        setattr(self, key, value)

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
    def from_dict(cls: Type[_R], data: Dict[str, Any]) -> _R:
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in data.items() if k in names},
                   extra={k: v for k, v in data.items() if k not in names})


def _plain(value: Any) -> Any:
    if isinstance(value, _Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclasses.dataclass
class SourceRecord(_Record):
    """What the run read: its path, format, sha256 of each file, and how names were handled."""
    checkpoint: str
    format: str
    files: Dict[str, str] = dataclasses.field(default_factory=dict)
    names: str = ""
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class StackRecord(_Record):
    """One converted cuDNN stack: its buffer variable, spec, target tensors, and its artifacts (manifest key of the
    format's artifact -> path in OUT)."""
    variable: str
    prefix: str
    label: str
    spec: Dict[str, Any]
    param_count: int = 0
    spec_source: str = ""
    targets: List[str] = dataclasses.field(default_factory=list)
    slots: Dict[str, Any] = dataclasses.field(default_factory=dict)
    artifacts: Dict[str, str] = dataclasses.field(default_factory=dict)
    scheme: Optional[str] = road_field()  # the target's naming scheme, where it has several (tf1: legacy names)
    stored_canonical: Optional[Dict[str, Any]] = road_field()  # canonical tensors stored beside the buffer: agree?
    graphdef_nodes: Optional[Dict[str, List[str]]] = road_field()  # the frozen graph's input and output tensors
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Manifest(_Record):
    """OUT's record. ``kind``: the road that wrote it in the manifest's words ("weights": stack by stack;
    "keras_model"; "saved_model"), :attr:`road` in the roads' ("stack", "model", "graph"; ``source.ROADS``).
    ``model_artifacts``: the whole model's artifacts (key -> path in OUT); ``files``: sha256 of every file of OUT."""
    tool: str = TOOL
    manifest_version: int = MANIFEST_VERSION
    version: str = __version__
    created: str = ""
    source: SourceRecord = dataclasses.field(default_factory=lambda: SourceRecord(checkpoint="", format=""))
    kind: str = "weights"
    style: Optional[str] = None
    formats: List[str] = dataclasses.field(default_factory=list)
    stacks: List[StackRecord] = dataclasses.field(default_factory=list)
    model_artifacts: Dict[str, str] = dataclasses.field(default_factory=dict)
    warnings: List[str] = dataclasses.field(default_factory=list)
    files: Dict[str, str] = dataclasses.field(default_factory=dict)
    # road fields, declared in the order the roads write them (the JSON keeps that order): the stack road
    # (cudnn_port.roads.stack) slot_policy .. saved_model_xla; the graph road (cudnn_port.roads.graph) nodes ..
    # params_reordered, onnx_*; the whole-model road (cudnn_port.roads.model) model_* .. parity; graphdef_nodes and
    # int8 on several
    slot_policy: Optional[str] = road_field()  # how optimizer slots are converted
    name_map: Optional[Dict[str, List[str]]] = road_field()  # buffer variable -> the tensors written for it
    copied: Optional[List[str]] = road_field()  # source variables copied unchanged
    dropped: Optional[List[str]] = road_field()  # source variables left out
    replaced: Optional[Dict[str, Any]] = road_field()  # canonical tensors rewritten under their own names
    saved_model_xla: Optional[bool] = road_field()
    nodes: Optional[List[Dict[str, Any]]] = road_field()  # the cuDNN nodes called, each rewritten
    uncalled_functions_dropped: Optional[Dict[str, Any]] = road_field()
    gpu_alternatives: Optional[List[Dict[str, Any]]] = road_field()
    params_reordered: Optional[Dict[str, str]] = road_field()  # "function/node" -> what was done
    model_inputs: Optional[List[str]] = road_field()
    # {name, dtype, shape (None: any size)}; a .pt2's also program_name (its forward's argument: `_x` where name is `x`)
    model_input_specs: Optional[List[Dict[str, Any]]] = road_field()
    streaming: Optional[List[Dict[str, Any]]] = road_field()  # stateful layers: their state inputs and outputs
    graphdef_nodes: Optional[Dict[str, List[str]]] = road_field()
    onnx_signature: Optional[str] = road_field()  # the signature model.onnx holds
    onnx_input: Optional[Dict[str, Any]] = road_field()  # the input of the numeric part, where model.onnx is one
    onnx_part: Optional[str] = road_field()  # what that part leaves out
    not_asked_for: Optional[List[str]] = road_field()  # whole-model formats --formats left out
    model_layers: Optional[List[Dict[str, Any]]] = road_field()  # each fused or stock recurrent layer and its stack
    model_output_specs: Optional[List[Dict[str, Any]]] = road_field()
    task: Optional[str] = road_field()  # OUT's task.json, where the model came with one
    int8: Optional[List[Dict[str, Any]]] = road_field()  # each int8 artifact and its quantization settings
    precision: Optional[Dict[str, Any]] = road_field()  # a mixed-precision model's policy and how it is judged
    parity: Optional[Dict[str, Any]] = road_field()  # the export's own whole-model check
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def road(self) -> Optional[str]:
        """The road that wrote OUT ("stack", "model" or "graph"), read from ``kind``; None for a kind this version
        does not know."""
        return next((road for road, kind in ROADS.items() if kind == self.kind), None)

    @road.setter
    def road(self, road: str) -> None:
        self.kind = ROADS[road]

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Manifest":
        """The record of a manifest's JSON form (version 1 or 2); a damaged one raises ValueError/TypeError."""
        data = dict(data)
        data["source"] = SourceRecord.from_dict(data["source"])
        data["stacks"] = [StackRecord.from_dict(s) for s in data.get("stacks", [])]
        data.setdefault("manifest_version", 1)
        return super().from_dict(data)


def new_manifest(source: str, source_format: str, names_note: str, formats: Sequence[str],
                 style: Optional[str] = None, road: str = "stack") -> Manifest:
    """A manifest for a run that reads ``source`` (a path) on ``road`` (:data:`cudnn_port.source.ROADS`)."""
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    where = os.path.abspath(source) if os.path.exists(source) else source
    return Manifest(source=SourceRecord(checkpoint=where, format=source_format, names=names_note), created=created,
                    kind=ROADS[road], style=style, formats=list(formats))


def save_manifest(manifest: Manifest, folder: str, hashes: Dict[str, str]) -> Manifest:
    """Record ``hashes`` (path in OUT -> sha256 of every file but the manifest) and write ``folder``/manifest.json."""
    manifest.files = dict(hashes)
    with open(os.path.join(folder, MANIFEST), "w") as f:
        json.dump(manifest.to_dict(), f, indent=2)
    return manifest


def read_ours(path: str, max_bytes: Optional[int] = None) -> Optional[Dict[str, Any]]:
    """The JSON at ``path`` if it parses as a manifest of ours (a dict whose ``tool`` is cudnn-port, at most
    ``max_bytes`` long), else None."""
    try:
        if max_bytes is not None and os.path.getsize(path) > max_bytes:
            return None
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("tool") == TOOL else None


def read_manifest(path: str) -> Optional[Manifest]:
    """The manifest at ``path`` if it is one of ours, else None; a newer layout than this version reads, or a
    damaged one, raises a one-line CudnnPortError."""
    data = read_ours(path)
    if data is None:
        return None
    version = data.get("manifest_version", 1)
    if not isinstance(version, int) or not 1 <= version <= MANIFEST_VERSION:
        raise CudnnPortError(f"{path} has manifest_version {version!r}, which this cudnn-port ({__version__}) "
                             f"does not read (it reads 1 to {MANIFEST_VERSION}); upgrade cudnn-port or convert again")
    for key, kind in (("files", dict), ("stacks", list), ("source", dict), ("model_artifacts", dict)):
        if not isinstance(data.get(key, kind()), kind):
            raise CudnnPortError(f"{path} is damaged ({key} is not a {kind.__name__}); convert again")
    try:
        return Manifest.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise CudnnPortError(f"{path} is damaged (not the fields of a manifest); convert again") from None


def load_manifest(out: "os.PathLike[str] | str") -> Manifest:
    """OUT's manifest, checked to be ours and whole. A file of OUT that is a pipe or a device (a reader would wait
    on it for ever) is refused here, before anything opens it."""
    path = os.path.join(os.fspath(out), MANIFEST)
    try:
        require_file(path, MANIFEST)
    except CudnnPortError:
        manifest = None
    else:
        manifest = read_manifest(path)
    if manifest is None:
        raise CudnnPortError(f"{out} is not a cudnn-port output (no readable manifest.json of ours); "
                             "run cudnn-port convert SOURCE OUT first and verify OUT")
    for root, dirs, files in os.walk(out):
        for name in files:
            full = os.path.join(root, name)
            if os.path.exists(full) and not os.path.isfile(full):
                raise CudnnPortError(f"{full} is not a regular file (a pipe or device), so OUT is not one cudnn-port "
                                     "wrote; convert again")
    return manifest


def warn(manifest: Manifest, say: Callable[[str], None], message: str) -> None:
    """Record ``message`` among the manifest's warnings (the summary and ``--json`` show them) and say it now."""
    manifest.warnings.append(message)
    say(f"warning: {message}")
