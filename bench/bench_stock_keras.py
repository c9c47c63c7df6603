"""Stock Keras 3 RNN models: Keras' own ``model.export`` against ``cudnn-port``, from one run.

For four small stock models (a masked Embedding -> BiLSTM x2 tagger, a Masking -> GRU classifier, an LSTM with
initial states in and states out, a Conv1D -> BiGRU -> GRU regressor) and each exporter (Keras ``format="onnx"``,
``"litert"``, ``"openvino"``; cudnn-port's ``model.onnx`` and ``model.tflite``), one row: does it convert, which ops
it holds (Loop / WHILE / Flex / fused LSTM or GRU), does it load and run in onnxruntime, OpenVINO (f32) and LiteRT
without the Flex delegate, its max error against the Keras model on a ragged batch (lengths 9, 1, 5, 7; states
N(0, 0.5)), and its batch-1 latency (median of 50 runs, 9 steps).

    python bench/bench_stock_keras.py [--json]
"""
import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

LENGTHS = np.array([9, 1, 5, 7])
_requests = {}  # one OpenVINO infer request per compiled model, as a server keeps it


def models():
    import keras

    L, out = keras.layers, {}
    ids = keras.Input((None,), dtype="int32", name="tokens")
    x = L.Embedding(30, 16, mask_zero=True)(ids)
    x = L.Bidirectional(L.LSTM(32, return_sequences=True))(L.Bidirectional(L.LSTM(32, return_sequences=True))(x))
    out["tagger (Emb -> BiLSTM x2)"] = keras.Model(ids, L.Dense(5)(x))
    x = keras.Input((None, 8), name="x")
    out["classifier (Masking -> GRU)"] = keras.Model(x, L.Dense(3)(L.GRU(32)(L.Masking()(x))))
    h0, c0 = keras.Input((32,), name="h0"), keras.Input((32,), name="c0")
    y, h, c = L.LSTM(32, return_sequences=True, return_state=True)(x, initial_state=[h0, c0])
    out["LSTM states in/out"] = keras.Model([x, h0, c0], [y, h, c])
    y = L.Bidirectional(L.GRU(24, return_sequences=True))(L.Conv1D(16, 3, padding="same")(x))
    out["regressor (Conv1D -> BiGRU -> GRU)"] = keras.Model(x, L.Dense(1)(L.GRU(16)(y)))
    rng = np.random.default_rng(0)
    for model in out.values():
        model.set_weights([(rng.normal(size=w.shape) * 0.3).astype(w.dtype) for w in model.get_weights()])
    return out


def feeds_for(model, batch=None):
    rng, steps = np.random.default_rng(1), int(LENGTHS.max())
    lengths = LENGTHS if batch is None else np.full(batch, steps)
    valid = np.arange(steps)[None, :] < lengths[:, None]
    feeds = {}
    for t in model.inputs:
        name = t.name.split(":")[0]
        if name == "tokens":
            feeds[name] = (rng.integers(1, 30, size=valid.shape) * valid).astype("int32")
        elif name == "x":
            feeds[name] = (rng.normal(size=valid.shape + (8,)) * valid[..., None]).astype("float32")
        else:
            feeds[name] = (rng.normal(size=(len(lengths), t.shape[-1])) * 0.5).astype("float32")
    return feeds


def onnx_ops(path):
    import onnx

    types = {n.op_type for n in onnx.load(path).graph.node}
    return ", ".join(sorted(types & {"Loop", "Scan", "LSTM", "GRU"})) or "plain"


def tflite_ops(path):
    from ai_edge_litert import schema_py_generated as fb

    with open(path, "rb") as f:
        model = fb.Model.GetRootAs(f.read(), 0)
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    ops = {names[max(c.BuiltinCode(), c.DeprecatedBuiltinCode())] for c in codes if not c.CustomCode()}
    flex = sorted(c.CustomCode().decode() for c in codes if c.CustomCode())
    seen = sorted(o for o in ops if o in ("WHILE", "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM"))
    return ", ".join(seen + ([f"Flex x{len(flex)}"] if flex else [])) or "plain"


def _openvino_run(compiled, feeds):
    """An OpenVINO CompiledModel on ``feeds`` by input name (by position where Keras' IR names them otherwise)."""
    names = [i.get_any_name() for i in compiled.inputs]
    values = [feeds[n] for n in names] if all(n in feeds for n in names) else list(feeds.values())
    result = _requests.setdefault(id(compiled), compiled.create_infer_request()).infer(values)
    return [result[o] for o in compiled.outputs]


def _why(error):
    """A refusal in a few words: OpenVINO's summary lines, LiteRT's missing Flex delegate, else the first line."""
    text = str(error)
    if "Select TensorFlow op" in text:
        return "needs the Flex delegate (Select TF ops)"
    summary = [line[3:] for line in text.splitlines() if line.startswith("-- ")]
    return ("; ".join(summary) or text.strip().splitlines()[0])[:110]


def runners(kind, path, names):
    """{runtime: run(feeds) -> list of outputs} for an ONNX or TFLite file (a loading failure raises)."""
    if kind == "onnx":
        import onnxruntime as ort

        from cudnn_port.exports.openvino import compile_onnx

        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        outs = [o.name for o in session.get_outputs()]
        yield "onnxruntime", lambda feeds: session.run(outs, {i.name: feeds[i.name] for i in session.get_inputs()})
        compiled = compile_onnx(path)
        yield "openvino", lambda feeds: _openvino_run(compiled, feeds)
    else:
        from ai_edge_litert.interpreter import Interpreter

        run = Interpreter(model_path=path).get_signature_runner("serving_default")
        keys = sorted(run.get_output_details())
        yield "litert", lambda feeds: [run(**{k: feeds[k] for k in run.get_input_details()})[k] for k in keys]


def keras_export(model, fmt, tmp):
    path = os.path.join(tmp, {"onnx": "m.onnx", "litert": "m.tflite", "openvino": "m.xml"}[fmt])
    model.export(path, format=fmt, verbose=False)
    return path


def row(name, exporter, make, model, want, feeds, one):
    entry = {"model": name, "exporter": exporter}
    try:
        path = make()
    except Exception as e:  # noqa: BLE001 (a refusal is a result)
        return [dict(entry, converts=f"no: {_why(e)}")]
    rows = []
    if path.endswith(".xml"):  # Keras' OpenVINO IR: read by OpenVINO directly
        import openvino as ov

        kind, ops = "xml", "IR"
        runs = []
        try:
            compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            runs = [("openvino", lambda f: _openvino_run(compiled, f))]
        except Exception as e:  # noqa: BLE001
            rows.append(dict(entry, converts="yes", ops=ops, runtime="openvino", loads=f"no: {_why(e)}"))
    else:
        kind = "onnx" if path.endswith(".onnx") else "tflite"
        ops = onnx_ops(path) if kind == "onnx" else tflite_ops(path)
        runs = []
        try:
            for runtime, run in runners(kind, path, None):
                runs.append((runtime, run))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(entry, converts="yes", ops=ops, runtime="openvino" if kind == "onnx" else "litert",
                             loads=f"no: {_why(e)}"))
    for runtime, run in runs:
        try:
            got = run(feeds)
            err = max(float(np.abs(np.asarray(g, np.float64).reshape(np.shape(w)) - w).max()) for g, w in
                      zip(sorted(got, key=np.size), sorted(want, key=np.size)))
            run(one)
            times = []
            for _ in range(50):
                start = time.perf_counter()
                run(one)
                times.append(time.perf_counter() - start)
            rows.append(dict(entry, converts="yes", ops=ops, runtime=runtime, loads="yes", max_err=err,
                             ms=1e3 * float(np.median(times))))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(entry, converts="yes", ops=ops, runtime=runtime, loads=f"fails: {_why(e)}"))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import keras

    import cudnn_port

    table = []
    for name, model in models().items():
        feeds, one = feeds_for(model), feeds_for(model, batch=1)
        inputs = [feeds[t.name.split(":")[0]] for t in model.inputs]
        result = model(inputs if len(inputs) > 1 else inputs[0])
        want = [np.asarray(r, np.float64) for r in (result if isinstance(result, list) else [result])]
        with tempfile.TemporaryDirectory() as tmp:
            for fmt in ("onnx", "litert", "openvino"):
                table += row(name, f"keras {fmt}", lambda: keras_export(model, fmt, tmp), model, want, feeds, one)
            out = os.path.join(tmp, "cp")
            for art in ("model.onnx", "model.tflite"):
                def make(art=art):
                    if not os.path.isdir(out):
                        cudnn_port.export(model, out)
                    return os.path.join(out, art)
                table += row(name, f"cudnn-port {art}", make, model, want, feeds, one)
        keras.backend.clear_session()
    if args.json:
        print(json.dumps(table, indent=1))
        return 0
    print("| model | exporter | converts | ops | runtime | loads | max err vs Keras | batch-1 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table:
        err = f"{r['max_err']:.1e}" if "max_err" in r else ""
        ms = f"{r['ms']:.2f}" if "ms" in r else ""
        print(f"| {r['model']} | {r['exporter']} | {r['converts']} | {r.get('ops', '')} | {r.get('runtime', '')} | "
              f"{r.get('loads', '')} | {err} | {ms} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
