"""The whole-model and graph roads walked through the format registry: each format that declares a
:class:`~cudnn_port.formats.Road` writes its artifacts (:func:`write_road`) and runs them for the judge
(:func:`model_artifact_rows`); nothing here names a format.

    job = ModelJob(model, specs, tmp, trace)     # what every whole-model writer reads, traced once
    manifest.model_artifacts.update(write_road("model", job, tmp, manifest, say))
"""
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import formats as registry
from .manifest import Manifest, warn

if TYPE_CHECKING:
    import numpy as np


class ModelJob:
    """A Keras model being exported whole: ``specs`` its input specs; ``trace(path)`` its serving function traced on
    the fused layers' ``"cpu"`` or ``"cudnn"`` path. The traces and frozen forms are made once, when a writer first
    asks. The runners read ``input_names`` and ``count`` (outputs ``output_0`` ...) and the manifest's records."""

    def __init__(self, model: Any, specs: Sequence[Any], tmp: str, trace: Callable[[str], Any]) -> None:
        self.model, self.specs, self.tmp, self._trace, self._cache = model, list(specs), tmp, trace, {}
        self.input_names = [s.name for s in self.specs]
        self.manifest: Optional[Manifest] = None
        self.count = 0

    def _once(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def traced(self, path: str) -> Any:
        """The concrete function on the fused layers' ``path`` ("cpu": plain ops; "cudnn": the fused op)."""
        return self._once(path, lambda: self._trace(path))

    def frozen(self, path: str) -> Any:
        """:meth:`traced` with its variables frozen into constants."""
        from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

        return self._once(f"frozen {path}", lambda: convert_variables_to_constants_v2(self.traced(path)))


class GraphJob:
    """A SavedModel whose cuDNN nodes are being rewritten (:mod:`cudnn_port.graphs`): its folder, parsed proto, the
    cuDNN nodes found, and which params were gathered into cuDNN's gate order."""

    def __init__(self, source: str, proto: Any, nodes: List[Any], reordered: Any, say: Callable[[str], None],
                 user_graph: Callable[[str], Any]) -> None:
        self.source, self.proto, self.nodes, self.reordered, self.say = source, proto, nodes, reordered, say
        self.user_graph = user_graph  # user_graph(what): a context in which errors on the graph are one line
        self.manifest: Optional[Manifest] = None  # the manifest being written (a writer records warnings in it)


def layer_formats() -> List[str]:
    """The formats each fused layer of a whole-model export is written in alone (step functions for decoding): the
    checkpoint and every format that also serves the whole-model road."""
    return ["checkpoint"] + [f.name for f in registry.on_road("model") if f.artifacts]


def road_plan(road: str, specs: Sequence[Any], job: Any = None) -> Tuple[List[str], Dict[str, str]]:
    """What ``road`` would write for a model holding stacks of ``specs``: (paths in OUT, {path: why not}), from each
    format's declared artifacts and what it cannot hold (ONNX: a projection); a format that declares when it
    applies counts only where it applies to ``job``."""
    paths, not_written = [], {}
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


def write_road(road: str, job: Any, tmp: str, manifest: Manifest, say: Callable[[str], None],
               formats: Optional[Sequence[str]] = None) -> Dict[str, str]:
    """Each format on ``road`` (of ``formats``, if given) writes its artifacts into ``tmp``; returns {key: path in
    OUT} of what was written; a format that cannot hold the model is a warning in ``manifest``."""
    written = {}
    job.written = {}  # {key: absolute path} of what the formats before this one wrote (a writer may read them)
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
        manifest.record(details or {})
        written.update(rels)
        job.written.update((k, os.path.join(tmp, rel)) for k, rel in rels.items())
    return written


class GraphCheck:
    """A converted SavedModel being verified (the graph road's runtimes read it): OUT, its manifest, the signature
    every artifact is judged on, and each SavedModel of OUT loaded once (:meth:`saved_model`)."""

    def __init__(self, out: str, manifest: Manifest, signature: str) -> None:
        self.out, self.manifest, self.signature, self._loaded = out, manifest, signature, {}

    def saved_model(self, path: str) -> Any:
        from .exports.runners import load_saved_model

        if path not in self._loaded:
            self._loaded[path] = load_saved_model(path)
        return self._loaded[path]


def model_artifact_rows(out: str, job: ModelJob, feeds: Dict[str, "np.ndarray"], want: List["np.ndarray"],
                        atol: float, rtol: float, say: Callable[[str], None]) -> List[Dict[str, Any]]:
    """A row per whole-model artifact of ``job.manifest`` that a format can run: its outputs on ``feeds`` against
    ``want`` (an artifact that fails to run: a failed row; a runtime that is not installed: a skipped row)."""
    from .judging.parity import compare, failed_row

    job.count = len(want)
    return _runner_rows("model", out, job.manifest.model_artifacts, job, feeds, say,
                        lambda row, got: compare(row, got, want, atol, rtol), lambda row, needs, e: failed_row(row, e))


def graph_artifact_rows(job: GraphCheck, feeds: Dict[str, "np.ndarray"], want: Dict[str, "np.ndarray"],
                        judge_key: Optional[str], atol: float, rtol: float,
                        say: Callable[[str], None]) -> List[Dict[str, Any]]:
    """A row per artifact of a converted SavedModel (``job``) that a format on the graph road runs: the signature's
    outputs on ``feeds`` against ``want`` ({output name: array}, the judge's), each at the larger of the user's
    tolerance and the one its runtime states; the artifact ``judge_key`` (the converted SavedModel, when the
    original could not run) is the judge and has no row."""
    from .judging.graph_inputs import could_not_run
    from .judging.parity import compare

    def judge(row, got):
        names = sorted(want)
        if set(got.values) != set(names):
            return {"artifact": row, "max_abs": None, "max_rel": None, "passed": False,
                    "note": f"outputs {sorted(got.values)}, the judge's {names}"}
        return compare(row, [got.values[n] for n in names], [want[n] for n in names], max(atol, got.atol),
                       max(rtol, got.rtol), note=got.note)

    def fail(row, needs, error):
        return could_not_run(row, {"tensorflow": "TensorFlow"}.get(needs[0], needs[0]) if needs else "it", error)

    arts = {k: v for k, v in job.manifest.model_artifacts.items() if k != judge_key}
    return _runner_rows("graph", job.out, arts, job, feeds, say, judge, fail)


def _runner_rows(road: str, out: str, arts: Dict[str, str], job: Any, feeds: Dict[str, "np.ndarray"],
                 say: Callable[[str], None], judge: Callable[[str, Any], Dict[str, Any]],
                 fail: Callable[[str, Tuple[str, ...], BaseException], Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Each artifact of ``arts`` ({key: path in OUT}) run through every runtime its format declares on ``road``,
    in registry order; ``judge(row name, outputs)`` makes the row, ``fail(row name, the runtime's needs, error)``
    the failed row of one that raises; a runtime that is not installed is a skipped row."""
    from . import deps
    from .judging.parity import skipped_row

    rows = []
    for fmt in registry.on_road(road):
        part = getattr(fmt, road)
        for artifact in part.artifacts:
            for row, open_, needs in (part.runners() if artifact.key in arts else ()):
                row = row.format(signature=getattr(job, "signature", ""))
                missing = [m for m in needs if not deps.available(m)]
                if missing:
                    rows.append(skipped_row(row, f"{missing[0]} is not installed "
                                                 f"({deps.EXTRAS.get(missing[0], 'pip install ' + missing[0])})"))
                    continue
                say(f"parity: {row}")
                try:
                    got = open_(os.path.join(out, arts[artifact.key]), job)(feeds)
                except Exception as e:  # noqa: BLE001 (an artifact that fails to run is a failed check)
                    rows.append(fail(row, needs, e))
                    continue
                rows.append(judge(row, got))
    return rows
