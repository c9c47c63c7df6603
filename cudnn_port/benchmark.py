"""CPU latency and throughput of each artifact of a convert output (``cudnn-port bench OUT``).

Each artifact is loaded once, warmed up, then timed on full-length random batches; the median of the timed
runs is reported, with throughput in sequences per second and time steps per second.
"""
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from .errors import CudnnPortError
from .exports import io_names
from .formats import derived_label, stack_runtimes
from .layout import RNNSpec
from .manifest import load_manifest
from .verify import file_rows

if TYPE_CHECKING:
    from .manifest import Manifest
from .progress import Progress, say_to
from . import deps, formats as registry
from .formats.jobs import GraphCheck, Job, ModelJob, StackJob
from .graphs.trust import check_out
from .judging.signature_feeds import signature_feeds


def time_call(fn: Callable[[Dict[str, np.ndarray]], Any], feeds: Dict[str, np.ndarray], repeat: int,
              warmup: int = 2) -> float:
    """Median seconds of ``fn(feeds)`` over ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn(feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def bench(out: "os.PathLike[str] | str", batches: Sequence[int] = (1, 32), steps: int = 100, repeat: int = 5,
          progress: Optional[Progress] = None, trust_source: bool = False) -> Dict[str, Any]:
    """Time every artifact of ``out`` at each batch size; return a JSON-ready dict. A graph in OUT that is not pure
    computation is refused before anything runs, unless ``trust_source``."""
    out = os.fspath(out)
    manifest = load_manifest(out)
    files = file_rows(out, manifest)[0]
    if not files["passed"]:  # another model in OUT's place would be timed, or fail on its own inputs
        raise CudnnPortError(f"{out} is not as convert wrote it ({files['note']}); convert again, or run cudnn-port "
                             "verify OUT to see what changed")
    say = say_to(progress)
    check_out(out, manifest, trust_source=trust_source, say=say)
    rows = []
    for stack in manifest.stacks:
        spec = RNNSpec(**stack.spec.to_dict())
        names_in, _ = io_names(spec)
        for name, states, fn in _runners(out, stack, spec):
            for batch in batches:
                rng = np.random.default_rng(0)
                h = np.zeros((spec.num_pseudo_layers, batch, spec.state_size), np.float32)
                c = np.zeros((spec.num_pseudo_layers, batch, spec.num_units), np.float32)
                feeds = dict(zip(names_in, (rng.normal(size=(batch, steps, spec.input_size)).astype(np.float32),
                                            np.full(batch, steps, np.int32), h, c)))
                if states == "none":
                    feeds = {k: feeds[k] for k in ("inputs", "sequence_lengths")}
                say(f"{stack.variable}: {name} batch {batch}")
                seconds = time_call(fn, feeds, repeat)
                rows.append({"stack": stack.variable, "artifact": name, "batch": batch, "steps": steps,
                             "latency_ms": seconds * 1e3, "sequences_per_s": batch / seconds,
                             "steps_per_s": batch * steps / seconds})
    rows += whole_model_rows(out, manifest, batches, steps, repeat, say)
    return {"out": os.path.abspath(out), "threads": os.cpu_count(), "rows": rows}


def _runners(out, stack, spec):
    """(row name, what states it takes, run) for every artifact of ``stack`` (int8 ones included) in each runtime its
    format benches (one whose package is missing is left out). Artifacts that take states are fed zeros."""
    usable = [(key, rel, artifact, runtime) for key, rel, _, artifact, runtime, missing
              in stack_runtimes(stack.artifacts, derived=True) if runtime.bench and not missing]
    for key, rel, artifact, runtime in usable:
        label = derived_label(key)  # "onnx int8 (onnxruntime)", verify's name for the row
        name = f"{label} ({runtime.name})" if label else key if sum(k == key for k, *_ in usable) == 1 else \
            f"{key} ({runtime.name})"
        yield name, artifact.states, runtime.open(os.path.join(out, rel), StackJob(spec))


def whole_model_rows(out: str, manifest: "Manifest", batches: Sequence[int], steps: int, repeat: int,
                     say: Progress) -> List[Dict[str, Any]]:
    """The artifacts of a whole model or a rewritten graph (each format on the ``model`` or ``graph`` road that can
    run one), timed on the inputs verify draws for the serving signature (token ids where an
    input indexes a table, sentences for strings), resized to each batch and ``steps`` where the signature leaves
    those dimensions open (a ragged input is timed as drawn: its row splits fix the batch)."""
    arts = manifest.model_artifacts
    road = manifest.road
    if road not in ("model", "graph") or "saved_model" not in arts:
        return []
    check = GraphCheck(out, manifest, (manifest.onnx_signature or "serving_default") if road == "graph" else
                       "serving_default")
    serving = check.saved_model(os.path.join(out, arts["saved_model"])).signatures[check.signature]
    base, note = signature_feeds(serving, 0)
    ragged = [k for k in base if k.endswith("_1") and k[:-2] in base and "ragged" in note]  # row splits: as drawn
    open_dims = {name: spec.shape.as_list() for name, spec in serving.structured_input_signature[1].items()}
    job: Job = check
    if road == "model":
        job = ModelJob(None, [], out, None, manifest=manifest, input_names=manifest.model_inputs,
                       count=len(serving.structured_outputs))
    rows, stack = [], "(whole model)" if road == "model" else "(whole graph)"
    for fmt in registry.on_road(road):
        part = getattr(fmt, road)
        if part.open is None or not all(deps.available(m) for m in part.needs):
            continue
        row = part.row.format(signature=check.signature)
        head, _, runtime = row.rstrip(")").partition(" (")  # int8 too, named as verify names it: "onnx int8 (...)"
        keys = [(a.key, row) for a in part.artifacts] + [
            (d.key(a.key), f"{head} {d.name}" + (f" ({runtime})" if runtime else "")) for a in part.artifacts
            for d in fmt.derived if a.key in d.of and (not d.runtimes or runtime in d.runtimes)]
        for key, name in keys:
            if key not in arts:
                continue
            run = part.open(os.path.join(out, arts[key]), job)
            for batch in [len(base[ragged[0]]) - 1] if ragged else batches:
                feeds = base if ragged else {
                    key: np.resize(value, [want if dim is None else dim for want, dim in
                                           zip((batch, steps), open_dims[key])] + list(value.shape[2:]))
                    for key, value in base.items()}
                say(f"{stack}: {name} batch {batch}")
                seconds = time_call(run, feeds, repeat)
                rows.append({"stack": stack, "artifact": name, "batch": batch, "steps": steps,
                             "latency_ms": seconds * 1e3, "sequences_per_s": batch / seconds,
                             "steps_per_s": batch * steps / seconds})
    return rows


def format_table(report: Dict[str, Any]) -> str:
    lines = [f"{'stack':<28} {'artifact':<24} {'batch':>5} {'steps':>5} {'latency ms':>11} {'seq/s':>9} "
             f"{'steps/s':>10}"]
    for r in report["rows"]:
        lines.append(f"{r['stack']:<28} {r['artifact']:<24} {r['batch']:>5} {r['steps']:>5} {r['latency_ms']:>11.2f} "
                     f"{r['sequences_per_s']:>9.1f} {r['steps_per_s']:>10.0f}")
    return "\n".join(lines)
