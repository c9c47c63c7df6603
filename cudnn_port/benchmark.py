"""CPU latency and throughput of each artifact of a convert output (``cudnn-port bench OUT``).

Each artifact is loaded once, warmed up, then timed on full-length random batches; the median of the timed
runs is reported, with throughput in sequences per second and time steps per second.
"""
import os
import time

import numpy as np

from .exports import io_names
from .layout import RNNSpec
from .verify import load_manifest


def _loaders(out, stack, spec):
    arts = stack["artifacts"]
    names_in, names_out = io_names(spec)
    if "saved_model" in arts:
        def saved_model():
            import tensorflow as tf

            fn = tf.saved_model.load(os.path.join(out, arts["saved_model"])).signatures["with_initial_state"]
            return lambda feeds: fn(**{k: tf.constant(v) for k, v in feeds.items()})

        yield "saved_model", saved_model
    if "graphdef" in arts:
        def graphdef():
            import tensorflow as tf

            graph_def = tf.compat.v1.GraphDef()
            with open(os.path.join(out, arts["graphdef"]), "rb") as f:
                graph_def.ParseFromString(f.read())
            graph = tf.Graph()
            with graph.as_default():
                tf.compat.v1.import_graph_def(graph_def, name="")
            sess = tf.compat.v1.Session(graph=graph)
            fetches = [f"{n}:0" for n in names_out]
            return lambda feeds: sess.run(fetches, {f"{k}:0": v for k, v in feeds.items()})

        yield "graphdef", graphdef
    if "onnx" in arts:
        def onnx():
            import onnxruntime as ort

            session = ort.InferenceSession(os.path.join(out, arts["onnx"]), providers=["CPUExecutionProvider"])
            return lambda feeds: session.run(list(names_out), feeds)

        yield "onnx", onnx


def time_call(fn, feeds, repeat, warmup=2):
    """Median seconds of ``fn(feeds)`` over ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn(feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def bench(out, batches=(1, 32), steps=100, repeat=5, progress=None):
    """Time every artifact of ``out`` at each batch size; return a JSON-ready dict."""
    out = os.fspath(out)
    manifest = load_manifest(out)
    say = progress or (lambda message: None)
    rows = []
    for stack in manifest["stacks"]:
        spec = RNNSpec(**stack["spec"])
        names_in, _ = io_names(spec)
        for name, load in _loaders(out, stack, spec):
            fn = load()
            for batch in batches:
                rng = np.random.default_rng(0)
                state = np.zeros((spec.num_pseudo_layers, batch, spec.num_units), np.float32)
                feeds = dict(zip(names_in, (rng.normal(size=(batch, steps, spec.input_size)).astype(np.float32),
                                            np.full(batch, steps, np.int32), state, state)))
                say(f"{stack['variable']}: {name} batch {batch}")
                seconds = time_call(fn, feeds, repeat)
                rows.append({"stack": stack["variable"], "artifact": name, "batch": batch, "steps": steps,
                             "latency_ms": seconds * 1e3, "sequences_per_s": batch / seconds,
                             "steps_per_s": batch * steps / seconds})
    return {"out": os.path.abspath(out), "threads": os.cpu_count(), "rows": rows}


def format_table(report):
    lines = [f"{'stack':<28} {'artifact':<12} {'batch':>5} {'steps':>5} {'latency ms':>11} {'seq/s':>9} {'steps/s':>10}"]
    for r in report["rows"]:
        lines.append(f"{r['stack']:<28} {r['artifact']:<12} {r['batch']:>5} {r['steps']:>5} {r['latency_ms']:>11.2f} "
                     f"{r['sequences_per_s']:>9.1f} {r['steps_per_s']:>10.0f}")
    return "\n".join(lines)
