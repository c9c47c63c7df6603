"""What every road hands the formats, and what their runtimes hand back: one :class:`Job` type (a
:class:`StackJob` on the stack road, a :class:`ModelJob` on the whole-model road, a :class:`GraphJob` while a
rewritten graph is written and a :class:`GraphCheck` while it is verified), read by every writer
``write(job, paths)`` and every runtime ``open(path, job) -> run(feeds)``; every ``run`` returns :class:`Outputs`.
Also the walk through the format registry in which each format that declares a :class:`~cudnn_port.formats.Road`
writes its artifacts (:func:`write_road`); nothing here names a format. The judge runs them with
:mod:`cudnn_port.judging.artifact_rows` and :mod:`cudnn_port.judging.stack_rows`.

    job = ModelJob(model, specs, tmp, trace, manifest=manifest)  # what every whole-model writer reads, traced once
    manifest.model_artifacts.update(write_road("model", job, tmp, manifest, say))
"""
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from .. import formats as registry
from ..exports import OUTPUT_NAMES
from ..exports.runners import load_saved_model
from ..manifest import Manifest, warn

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

    from ..canonical import CanonicalRNN
    from ..layout import RNNSpec


class Outputs(NamedTuple):
    """What every runtime's ``run(feeds)`` returns: ``values`` {output name: array} (a stack: ``outputs``,
    ``final_h``, ``final_c`` where it returns them; a whole model: ``output_0`` ...; a graph: its signature's
    names); ``note`` for the verify row; ``atol`` / ``rtol``: the least tolerance its numbers allow (an ONNX that
    computes in float16), 0: the user's; the judge grants it only where the source computes so too."""

    values: Dict[str, Any]
    note: str = ""
    atol: float = 0.0
    rtol: float = 0.0

    @classmethod
    def of_stack(cls, values: Sequence[Any], note: str = "") -> "Outputs":
        """A stack's ``[outputs, final_h, final_c]`` (a None or a missing one: not returned)."""
        return cls({n: v for n, v in zip(OUTPUT_NAMES, values) if v is not None}, note)

    @staticmethod
    def traced_names(count: int) -> List[str]:
        """The names of a traced whole model's ``count`` outputs in the order its concrete function returns them:
        the keys of its dict sorted, as TensorFlow flattens a dict (``output_10`` before ``output_2``)."""
        return sorted(f"output_{i}" for i in range(count))

    @staticmethod
    def number(name: str) -> float:
        """The N of a whole model's output named ``output_N``, the key that puts them in the model's order (any other
        name after them)."""
        found = re.fullmatch(r"output_(\d+)", name)
        return int(found.group(1)) if found else float("inf")

    @classmethod
    def of_model(cls, values: Sequence[Any]) -> "Outputs":
        """A whole model's outputs in order: ``output_0`` ..."""
        return cls({f"output_{i}": v for i, v in enumerate(values)})

    def ordered(self, names: Sequence[str]) -> List[Any]:
        """The values of ``names``, in that order (None where one was not returned)."""
        return [self.values.get(n) for n in names]


class Job:
    """What a road hands each format: the manifest being written or read (a writer records warnings in it), what
    the formats before this one wrote ({key: absolute path}: a writer may read them), and where progress goes."""

    def __init__(self, manifest: Optional[Manifest] = None, say: Callable[[str], None] = lambda message: None
                 ) -> None:
        self.manifest, self.say = manifest, say
        self.written: Dict[str, str] = {}


class StackJob(Job):
    """One cuDNN stack: ``spec``; when written, its canonical weights ``canon``, its label ``name`` and the
    options of the conversion (``xla``)."""

    def __init__(self, spec: "RNNSpec", canon: "Optional[CanonicalRNN]" = None, name: str = "",
                 options: Optional[Dict[str, Any]] = None) -> None:
        super().__init__()
        self.spec, self.canon, self.name, self.options = spec, canon, name, dict(options or {})


class ModelJob(Job):
    """A Keras model being exported whole: ``specs`` its input specs; ``trace(path)`` its serving function traced on
    the fused layers' ``"cpu"`` or ``"cudnn"`` path (None where the job only runs artifacts already written). The
    traces and frozen forms are made once, when a writer first asks. The runners read ``input_names`` (default: the
    specs' names) and ``count`` (outputs ``output_0`` ...; a judge sets it to the outputs it compares) and
    ``manifest``'s records. ``batch``: the batch the model declares (``keras.Input(batch_shape=...)``), if any;
    ``axes``: {input name or output_N: each dimension's role, "batch" / "time" / None} where the batch is not first
    everywhere (a PyTorch program's time-major inputs), None: batch first, time second."""

    def __init__(self, model: "Optional[keras.Model]", specs: "Sequence[tf.TensorSpec]", tmp: str,
                 trace: Optional[Callable[[str], Any]], *, manifest: Optional[Manifest] = None,
                 input_names: Optional[Sequence[str]] = None, count: int = 0, batch: Optional[int] = None,
                 axes: Optional[Dict[str, List[Optional[str]]]] = None) -> None:
        super().__init__(manifest)
        self.model, self.specs, self.tmp, self._trace = model, list(specs), tmp, trace
        self._cache: Dict[str, Any] = {}
        self.input_names = list(input_names) if input_names is not None else [s.name for s in self.specs]
        self.count, self.batch, self.axes = count, batch, axes

    def _once(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def traced(self, path: str) -> Any:
        """The concrete function on the fused layers' ``path`` ("cpu": plain ops; "cudnn": the fused op)."""
        trace = self._trace
        if trace is None:
            raise TypeError("this job runs artifacts already written; it has no model to trace")
        return self._once(path, lambda: trace(path))

    def frozen(self, path: str) -> Any:
        """:meth:`traced` with its variables frozen into constants."""
        # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
        from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

        return self._once(f"frozen {path}", lambda: convert_variables_to_constants_v2(self.traced(path)))


class GraphJob(Job):
    """A SavedModel whose cuDNN nodes are being rewritten (:mod:`cudnn_port.graphs`): its folder, parsed proto, the
    cuDNN nodes found, and which params were gathered into cuDNN's gate order. ``original(signature)``: (feeds, the
    source's own outputs of ``signature`` on them, run on CPU by stock TensorFlow), the judge of a gate layout the
    graph cannot tell (:mod:`cudnn_port.graphs.layout_choice`), or None."""

    def __init__(self, source: str, proto: Any, nodes: List[Any], reordered: Any, say: Callable[[str], None],
                 user_graph: Callable[[str], Any], original: Optional[Callable[[str], Any]] = None,
                 manifest: Optional[Manifest] = None) -> None:
        super().__init__(manifest, say)
        self.source, self.proto, self.nodes, self.reordered = source, proto, nodes, reordered
        self.user_graph = user_graph  # user_graph(what): a context in which errors on the graph are one line
        self.original = original


class GraphCheck(Job):
    """A converted SavedModel being verified (the graph road's runtimes read it): OUT, its manifest, the signature
    every artifact is judged on, and each SavedModel of OUT loaded once (:meth:`saved_model`)."""

    def __init__(self, out: str, manifest: Manifest, signature: str) -> None:
        super().__init__(manifest)
        self.out, self.signature = out, signature
        self._loaded: Dict[str, Any] = {}

    def saved_model(self, path: str) -> Any:
        if path not in self._loaded:
            self._loaded[path] = load_saved_model(path)
        return self._loaded[path]


def open_artifact(key: str, path: str, spec: Any, runtime: Optional[str] = None) -> Callable[[Dict[str, Any]], Outputs]:
    """``run(feeds) -> Outputs`` of the artifact ``key`` of a stack of ``spec`` (a key of the manifest's
    ``artifacts``) at ``path``, through ``runtime`` (a name; default the format's first runtime)."""
    fmt, _ = registry.artifacts()[key]
    chosen = [r for r in fmt.runtimes if runtime in (None, r.name)]
    if not chosen:
        raise ValueError(f"{key} has no runtime {runtime!r}")
    return chosen[0].open(os.fspath(path), StackJob(spec))


def layer_formats() -> List[str]:
    """The formats each fused layer of a whole-model export is written in alone (step functions for decoding): the
    checkpoint and every format that also serves the whole-model road."""
    return ["checkpoint"] + [f.name for f in registry.on_road("model") if f.artifacts]


def road_plan(road: str, specs: Sequence[Any], job: Optional[Job] = None) -> Tuple[List[str], Dict[str, str]]:
    """What ``road`` would write for a model holding stacks of ``specs``: (paths in OUT, {path: why not}), from each
    format's declared artifacts and what it cannot hold (ONNX: a projection); a format that declares when it
    applies counts only where it applies to ``job``."""
    paths: List[str] = []
    not_written: Dict[str, str] = {}
    for fmt in registry.on_road(road):
        applies = getattr(fmt, road).applies
        if applies is not None and (job is None or not applies(job)):
            continue
        why = next(filter(None, (fmt.cannot_hold(spec) for spec in specs)), None)
        rels = [a.path for a in getattr(fmt, road).artifacts]
        if why:
            not_written.update((rel, why) for rel in rels)
        else:
            paths += rels
    return paths, not_written


def write_road(road: str, job: Job, tmp: str, manifest: Manifest, say: Callable[[str], None],
               formats: Optional[Sequence[str]] = None) -> Dict[str, str]:
    """Each format on ``road`` (of ``formats``, if given) writes its artifacts into ``tmp``; returns {key: path in
    OUT} of what was written; a format that cannot hold the model is a warning in ``manifest``."""
    written = {}
    job.written.clear()
    for fmt in registry.on_road(road):
        if formats is not None and fmt.name not in formats:
            continue
        part = getattr(fmt, road)
        if part.applies is not None and not part.applies(job):
            continue
        rels = {a.key: a.path for a in part.artifacts}
        for rel in rels.values():
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)) or tmp, exist_ok=True)
        try:
            say(f"writing {', '.join(rels.values())}")
            details = part.write(job, {k: os.path.join(tmp, rel) for k, rel in rels.items()})
        except registry.NotWritten as e:
            warn(manifest, say, f"{', '.join(rels.values())} not written: {e}")
            continue
        manifest.record(details or {}, own=fmt.records)
        written.update(rels)
        job.written.update((k, os.path.join(tmp, rel)) for k, rel in rels.items())
    return written
