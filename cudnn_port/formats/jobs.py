"""What the whole-model and graph roads hand the formats: the job each road builds (:class:`ModelJob`,
:class:`GraphJob`), and the walk through the format registry in which each format that declares a
:class:`~cudnn_port.formats.Road` writes its artifacts (:func:`write_road`); nothing here names a format. The judge
runs them with :mod:`cudnn_port.judging.artifact_rows`.

    job = ModelJob(model, specs, tmp, trace)     # what every whole-model writer reads, traced once
    manifest.model_artifacts.update(write_road("model", job, tmp, manifest, say))
"""
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .. import formats as registry
from ..manifest import Manifest, warn


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
        # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
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
