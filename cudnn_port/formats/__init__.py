"""The format registry: every output format of a stack is one module of this package, and registers itself.

A format module defines ``FORMAT = Format(...)``: its ``--formats`` name, the files it writes inside OUT, its writer,
the runtimes that run it (for ``verify`` and ``bench``), what it cannot hold and why, and the packages it needs.
Everything that lists, writes, runs or checks formats (the CLI's ``--formats`` help, ``convert``'s dependency
checks, ``roads.stack.write_stacks``, ``inspect``'s plan, ``verify``'s rows and ``bench``) asks this registry, so a new
format is one module here plus its test::

    FORMAT = Format(name="tflite", help="OUT/model.tflite: ...", artifacts=(Artifact("tflite", "model{suffix}.tflite",
                    states="optional"),), write=_write, runtimes=(Runtime("litert", _open, needs=("ai_edge_litert",)),),
                    cannot_hold=_cannot_hold, needs=("tensorflow",), order=70)

Format modules import nothing heavy at module level (``import cudnn_port`` and ``cudnn-port --help`` stay light);
their writers and runtimes import TensorFlow, onnx, ... when called.

On every road a writer is ``write(job, paths)`` and a runtime ``open(path, job) -> run``, ``job`` the road's
:class:`~.jobs.Job` (:class:`~.jobs.StackJob`: ``spec``, and when writing ``canon``, ``name``, ``options``); the
opener loads the artifact once, and ``run(feeds)`` returns :class:`~.jobs.Outputs`, values by name. On the stack road
``feeds`` are the interface's inputs by name (``inputs`` [B, T, I] float32, ``sequence_lengths`` [B] int32, and
``initial_h`` / ``initial_c`` [L*D, B, S|H] where the artifact takes states) and the values ``outputs``,
``final_h`` and ``final_c`` (where the artifact returns them; :meth:`~.jobs.Outputs.of_stack`).
"""
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from .. import deps
from ..discover import declared, insert
from ..errors import CudnnPortError, NotWritten, short  # noqa: F401 (NotWritten: formats raise it from here)

if TYPE_CHECKING:
    from ..layout import RNNSpec

STATES = ("none", "optional", "required")


@dataclass(frozen=True)
class Artifact:
    """One file (or folder) a format writes per stack. ``key``: its key in the manifest's ``artifacts``; ``path``:
    where it goes inside OUT (``{label}``: the stack's safe name, ``{suffix}``: ``_label`` when a source holds
    several stacks); ``states``: whether it takes initial states ("none": only inputs and sequence_lengths;
    "optional": states may be fed or left out (zeros); "required")."""

    key: str
    path: str
    states: str = "optional"
    label: str = ""  # how verify names it; default: the key

    def __post_init__(self):
        if self.states not in STATES:
            raise ValueError(f"states must be one of {STATES}, got {self.states!r}")

    def where(self, label: str, several: bool = False) -> str:
        return self.path.format(label=label, suffix=f"_{label}" if several else "")


@dataclass(frozen=True)
class Runtime:
    """A way users run an artifact: ``open(path, job) -> run(feeds) -> Outputs``; ``needs``: modules it imports (a
    missing one makes verify skip its rows with the reason); ``outputs_only``: it returns ``outputs`` alone."""

    name: str
    open: Callable
    needs: Tuple[str, ...] = ()
    outputs_only: bool = False
    bench: bool = True


@dataclass(frozen=True)
class Road:
    """A format's part on a road that writes one model for the whole source: ``model`` (a Keras model exported
    whole, :mod:`cudnn_port.roads.model`) or ``graph`` (a SavedModel whose cuDNN nodes are rewritten,
    :mod:`cudnn_port.graphs`).
    ``artifacts``: what it writes (paths in OUT, no ``{label}``); ``write(job, paths)`` writes them (``job``: the
    road's :class:`.jobs.ModelJob` or :class:`.jobs.GraphJob`) and returns details for the
    manifest or None, or raises :class:`NotWritten` (a warning; the other artifacts stand); ``open(path, job)`` ->
    ``run(feeds)`` -> :class:`.jobs.Outputs` (``output_0`` ...), for verify's row named ``row``; ``needs``: modules
    that runtime imports;
    ``applies(job)``: whether the format writes anything for this job (None: always); one that does not is passed
    over without a word (graphdef on the graph road: only for a signature that holds lookup tables); ``more``: further
    runtimes of the same artifact, each ``(row, open, needs)`` (ONNX in OpenVINO beside onnxruntime).
    On the graph road ``open(path, job)`` takes a :class:`.jobs.GraphCheck`, ``row`` may name ``{signature}``, and
    ``run(feeds)`` (the signature's inputs by name) returns the signature's outputs by name."""

    artifacts: Tuple[Artifact, ...]
    write: Callable
    open: Optional[Callable] = None
    row: str = ""
    needs: Tuple[str, ...] = ()
    applies: Optional[Callable] = None
    more: Tuple[Tuple[str, Callable, Tuple[str, ...]], ...] = ()

    def runners(self) -> List[Tuple[str, Callable, Tuple[str, ...]]]:
        """(row, open, needs) of each way verify runs the artifact: the first runtime, then ``more``."""
        return ([(self.row, self.open, self.needs)] if self.open is not None else []) + list(self.more)


@dataclass(frozen=True)
class Derived:
    """An artifact made from another one of the same format (ONNX's int8 model from its float32 one): ``name`` (the
    ``--quantize`` value), ``key_suffix`` (the manifest key and file stem get it: ``onnx`` -> ``onnx_int8``,
    ``model.onnx`` -> ``model_int8.onnx``), ``of``: the keys it derives from, ``write(src, dst)`` -> details,
    raising :class:`NotWritten` where there is nothing to derive; ``runtimes``: the names of its format's runtimes
    its judge runs it in, the only ones bench times it in (empty: all of them); ``needs``: the packages writing it
    needs (checked before work)."""

    name: str
    key_suffix: str
    of: Tuple[str, ...]
    write: Callable
    runtimes: Tuple[str, ...] = ()
    needs: Tuple[str, ...] = ()

    def key(self, key: str) -> str:
        return key + self.key_suffix

    def path(self, rel: str) -> str:
        stem, dot, ext = rel.rpartition(".")
        return f"{stem}{self.key_suffix}.{ext}" if dot else rel + self.key_suffix


@dataclass(frozen=True)
class Format:
    """One output format of a stack (see the module docstring). ``write(job, paths)`` (``job``: a
    :class:`.jobs.StackJob`) writes every artifact of ``paths`` ({artifact key: absolute path}) and returns details
    for the manifest or None; ``cannot_hold(spec)`` returns why this format cannot hold a stack of ``spec``, or None;
    ``order`` sorts formats in help texts and tables; ``default``: written by default (with the checkpoint and the
    style's own format); ``records``: the keys its writers return that are no field of the manifest's (a format
    defined outside this package records its own details), kept in the manifest as they are; any other undeclared
    key is refused (:meth:`cudnn_port.manifest.Manifest.record`)."""

    name: str
    help: str
    artifacts: Tuple[Artifact, ...] = ()
    write: Optional[Callable] = None
    runtimes: Tuple[Runtime, ...] = ()
    cannot_hold: Callable = field(default=lambda spec: None)
    needs: Tuple[str, ...] = ()
    default: bool = False
    order: int = 100
    model: Optional[Road] = None  # its whole-model artifacts (a .keras model)
    graph: Optional[Road] = None  # its artifacts of a rewritten SavedModel graph
    derived: Tuple[Derived, ...] = ()
    records: Tuple[str, ...] = ()


_REGISTRY: Dict[str, Format] = {}


def formats() -> Dict[str, Format]:
    """Every registered format by name, in ``order``: the modules of this package, imported once (they are light)."""
    if not _REGISTRY:
        _REGISTRY.update(declared(__name__, __path__, "FORMAT", Format, "name"))
    return _REGISTRY


def register(fmt: Format) -> None:
    """Add ``fmt`` to the registry, in its ``order`` among the modules of this package, as its module would: a format
    defined elsewhere (a plugin, a test's toy format). A name already registered is refused. What its writers return
    for the manifest is kept there as it is (:meth:`cudnn_port.manifest.Manifest.record`)."""
    insert(formats(), fmt, "name", "format")


def unregister(name: str) -> None:
    """Take format ``name`` out of the registry (what :func:`register` added)."""
    formats().pop(name, None)


def names() -> Tuple[str, ...]:
    return tuple(formats())


def get(name: str) -> Format:
    """The format called ``name``; an unknown name is bad input (one line naming the choices), never a default."""
    try:
        return formats()[name]
    except KeyError:
        raise CudnnPortError(f"unknown format {short(name, 40)!r}; choose from {', '.join(formats())}") from None


def check_names(requested: Iterable[str]) -> Tuple[str, ...]:
    """``requested`` as a tuple of known format names: an empty or unknown one is bad input."""
    requested = tuple(requested)
    if not requested:
        raise CudnnPortError("--formats is empty; name at least one of " + ", ".join(formats()))
    for name in requested:
        get(name)
    return requested


def default_formats(style_format: Optional[str] = None) -> Tuple[str, ...]:
    """What ``convert`` writes when --formats is not given: the checkpoint, the style's own format (keras or
    pytorch) and every format marked default."""
    chosen = {"checkpoint", style_format} | {f.name for f in formats().values() if f.default}
    return tuple(name for name in formats() if name in chosen)


def artifacts() -> Dict[str, Tuple[Format, Artifact]]:
    """{artifact key: (its format, the artifact)} over every format."""
    return {a.key: (f, a) for f in formats().values() for a in f.artifacts}


def stack_runtimes(stack_artifacts: Dict[str, str], derived: bool = False
                   ) -> Iterator[Tuple[str, str, Format, Artifact, Runtime, List[str]]]:
    """``(key, relative path, format, artifact, runtime, missing modules)`` for each artifact of a stack's manifest
    entry (``{key: relative path}``; keys no format knows are left out) in each runtime its format names, in order.
    ``derived``: a derived artifact (``onnx_int8``) too, in the runtimes its judge runs it in (``Derived.runtimes``;
    bench times it like any other, verify judges it by its own tolerance: :mod:`cudnn_port.judging.int8`)."""
    known: Dict[str, Tuple[Format, Artifact, Sequence[Runtime]]] = {
        key: (fmt, artifact, fmt.runtimes) for key, (fmt, artifact) in artifacts().items()}
    if derived:
        known.update({d.key(key): (f, known[key][1], [r for r in f.runtimes if r.name in d.runtimes or not d.runtimes])
                      for f in formats().values() for d in f.derived for key in d.of if key in known})
    for key, rel in stack_artifacts.items():
        if key in known:
            fmt, artifact, runtimes = known[key]
            for runtime in runtimes:
                yield key, rel, fmt, artifact, runtime, [m for m in runtime.needs if not deps.available(m)]


def derived_label(key: str) -> Optional[str]:
    """A derived artifact's row label, as verify names its rows ("onnx_int8" -> "onnx int8"); None for another key."""
    return next((f"{of} {d.name}" for f in formats().values() for d in f.derived for of in d.of if d.key(of) == key),
                None)


def needs(requested: Iterable[str], derived_name: Optional[str] = None) -> List[str]:
    """The modules writing ``requested`` formats needs, and the derived artifacts called ``derived_name`` (the
    ``--quantize`` value), in a stable order, once each."""
    found: List[str] = []
    for modules in [get(name).needs for name in requested] + [d.needs for _, d in derived(derived_name or "")]:
        found += [m for m in modules if m not in found]
    return found


def refusal(name: str, spec: "RNNSpec") -> Optional[str]:
    """Why format ``name`` cannot hold a stack of ``spec`` (None if it can)."""
    return get(name).cannot_hold(spec)


def on_road(road: str) -> List[Format]:
    """The formats that write on ``road`` ("model" or "graph"), in order."""
    return [f for f in formats().values() if getattr(f, road) is not None]


def derived(name: str) -> List[Tuple[Format, Derived]]:
    """Every format's derived artifact called ``name`` (e.g. "int8")."""
    return [(f, d) for f in formats().values() for d in f.derived if d.name == name]


def derived_names() -> Tuple[str, ...]:
    """The name of every kind of derived artifact the formats declare, once each (``--quantize``'s choices)."""
    return tuple(dict.fromkeys(d.name for f in formats().values() for d in f.derived))


def derived_keys(name: str) -> Dict[str, str]:
    """{derived key: the key it derives from} for ``name`` (e.g. {"onnx_int8": "onnx", ...})."""
    return {d.key(key): key for _, d in derived(name) for key in d.of}


def help_text() -> str:
    """One phrase per format for ``--formats``' help."""
    return "; ".join(f"{f.name} ({f.help})" for f in formats().values())
