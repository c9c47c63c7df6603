"""OUT/manifest.json: one typed record, read and written here and nowhere else.

    manifest = new_manifest(source, "name-based (TF1)", "names kept as they are", ["checkpoint", "onnx"], "tf1")
    manifest.stacks.append(StackRecord(variable="rnn/opaque_kernel", prefix="rnn", label="rnn",
                                       spec=SpecRecord.of(spec.to_dict())))
    save_manifest(manifest, tmp)                          # hashes every file of tmp into manifest.files, writes it
    manifest = load_manifest(out)                         # checked to be ours, whole, of a version we read

Every road (stacks, whole model, rewritten graph) writes the same :class:`Manifest`. What only one road records (a
whole model's ``parity``, a graph's ``nodes``, a checkpoint's ``name_map``) is a typed field too, declared with
:func:`road_field`: None, and absent from the JSON and from ``in``, until that road sets it. ``extra`` keeps only keys
this version does not know (a manifest a newer cudnn-port wrote), and the details a format defined outside this
package declares as its own (``Format.records``) and records through :meth:`Manifest.record`, so that they are written
back unchanged; the code reads none, and setting or recording an undeclared key raises. The records also answer
``manifest["key"]`` / ``.get`` / ``.setdefault`` for the JSON key of a field, so that code and users reading the JSON
form see one set of names. The values nested in a field are typed records too (:mod:`cudnn_port.manifest_records`:
a whole model's ``parity``, its input specs, a graph's ``nodes``, a stack's ``spec`` ...), read by attribute.

``manifest_version`` is this layout's number. A manifest without one (written before it existed: version 1, the same
keys) loads; a newer one is refused with one line (convert again with this version, or upgrade cudnn-port).
"""
import dataclasses
import datetime
import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence

from ._version import __version__
from .errors import CudnnPortError
from .manifest_records import (DroppedRecord, Int8Record, ModelLayerRecord, NodeRecord, OnnxInputRecord,
                               ParityRecord, PrecisionRecord, SlotRecord, SpecRecord, StoredCanonicalRecord,
                               StoredTensorRecord, StreamRecord, TensorSpecRecord)
from .paths import require_file
from .record_base import Record, road_field
from .source import ROADS

TOOL = "cudnn-port"
MANIFEST = "manifest.json"
MANIFEST_VERSION = 2  # 1: the untyped dict of cudnn-port <= 0.2.0 (same keys, no version field)


@dataclasses.dataclass
class SourceRecord(Record):
    """What the run read: its path, format, sha256 of each file, and how names were handled."""
    checkpoint: str
    format: str
    files: Dict[str, str] = dataclasses.field(default_factory=dict)
    names: str = ""
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class StackRecord(Record):
    """One converted cuDNN stack: its buffer variable, spec, target tensors, and its artifacts (manifest key of the
    format's artifact -> path in OUT)."""
    variable: str
    prefix: str
    label: str
    spec: SpecRecord
    param_count: int = 0
    spec_source: str = ""
    targets: List[str] = dataclasses.field(default_factory=list)
    slots: Dict[str, SlotRecord] = dataclasses.field(default_factory=dict)
    artifacts: Dict[str, str] = dataclasses.field(default_factory=dict)
    scheme: Optional[str] = road_field()  # the target's naming scheme, where it has several (tf1: legacy names)
    stored_canonical: Optional[StoredCanonicalRecord] = road_field()  # canonical tensors stored beside the buffer
    graphdef_nodes: Optional[Dict[str, List[str]]] = road_field()  # the frozen graph's input and output tensors
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Manifest(Record):
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
    replaced: Optional[Dict[str, StoredTensorRecord]] = road_field()  # stored canonical tensors rewritten
    saved_model_xla: Optional[bool] = road_field()
    nodes: Optional[List[NodeRecord]] = road_field()  # the cuDNN nodes called, each rewritten
    uncalled_functions_dropped: Optional[DroppedRecord] = road_field()
    gpu_alternatives: Optional[List[NodeRecord]] = road_field()
    params_reordered: Optional[Dict[str, str]] = road_field()  # "function/node" -> what was done
    model_inputs: Optional[List[str]] = road_field()
    # {name, dtype, shape (None: any size)}; a .pt2's also program_name (its forward's argument: `_x` where name is `x`)
    model_input_specs: Optional[List[TensorSpecRecord]] = road_field()
    streaming: Optional[List[StreamRecord]] = road_field()  # stateful layers: their state inputs and outputs
    graphdef_nodes: Optional[Dict[str, List[str]]] = road_field()
    onnx_signature: Optional[str] = road_field()  # the signature model.onnx holds
    onnx_input: Optional[OnnxInputRecord] = road_field()  # the input of the numeric part, where model.onnx is one
    onnx_part: Optional[str] = road_field()  # what that part leaves out
    not_asked_for: Optional[List[str]] = road_field()  # whole-model formats --formats left out
    model_layers: Optional[List[ModelLayerRecord]] = road_field()  # each fused or stock recurrent layer and its stack
    model_output_specs: Optional[List[TensorSpecRecord]] = road_field()
    task: Optional[str] = road_field()  # OUT's task.json, where the model came with one
    int8: Optional[List[Int8Record]] = road_field()  # each int8 artifact and its quantization settings
    precision: Optional[PrecisionRecord] = road_field()  # a mixed-precision model's policy and how it is judged
    parity: Optional[ParityRecord] = road_field()  # the export's own whole-model check
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
        data["source"] = SourceRecord.from_dict(data["source"])  # a manifest without one is damaged (KeyError)
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
