"""Stock Keras 3 RNN models: Keras' own ``model.export`` against ``cudnn-port``, from one run.

For four small stock models (a masked Embedding -> BiLSTM x2 tagger, a Masking -> GRU classifier, an LSTM with
initial states in and states out, a Conv1D -> BiGRU -> GRU regressor) and each exporter (Keras ``format="onnx"``,
``"litert"``, ``"openvino"``; cudnn-port's ``model.onnx`` and ``model.tflite``), one row: does it convert, which ops
it holds (Loop / WHILE / Flex / fused LSTM or GRU), does it load and run in onnxruntime, OpenVINO (f32) and LiteRT
without the Flex delegate, its max error against the Keras model on a ragged batch (lengths 9, 1, 5, 7; states
N(0, 0.5)), and its batch-1 latency (median of 50 runs, 9 steps).

    python bench/bench_stock_keras.py [--json]

``--speed``: for five stock models at the sizes users train them (Emb -> LSTM(256) x2 -> Dense, an LSTM(128)
encoder -> states -> decoder, Bidirectional(GRU(96)) x2, an Emb(mask_zero) -> BiLSTM(128) tagger, Masking ->
GRU(128); 50 steps), cudnn-port's ``model.onnx`` in onnxruntime against Keras' ``model.export(format="onnx")`` and
against a minimal graph of the same fused nodes written by hand (the bound an export can reach), at batch 1 (full
length) and 32 (right-padded, lengths 10-50), timed in alternating blocks; the plain SavedModel (TF Serving) at
both batches against Keras' own ``model.export(format="tf_saved_model")`` and, for the two unmasked LSTM models,
a SavedModel of TensorFlow's own fused CPU LSTM kernel (BlockLSTMV2 per layer, weights constant), and against
model.onnx, beside TensorFlow's floor at batch 1 (a SavedModel whose signature takes the same inputs and returns the
first: what a signature call costs before it computes anything); both ONNX files in OpenVINO where they load.
Targets: Keras / ours >= 1.0 where Keras writes fused nodes; >= 3 at batch 1 and >= 1.0 at batch 32 where it writes
a Loop; ours / minimal <= 1.1; SavedModel / Keras' own tf_saved_model <= 1.0 and SavedModel / the fastest single
TensorFlow form built here (Keras' own or BlockLSTMV2's) <= 1.1, at both batches (medians of the round-by-round
ratios). Exit 1 when a target is missed. ``--held-out``: the same five kinds at other realistic sizes, never used to
choose a form (Emb -> LSTM(512) x2 -> Dense, an LSTM(256) seq2seq of 64 features, Bidirectional(GRU(160)) x3 of 40
features, a BiLSTM(192) tagger, Masking -> GRU(256) of 80 features), against the same targets.

    python bench/bench_stock_keras.py --speed [--held-out] [--repeat 30] [--rounds 7] [--json]
"""
import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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


# ---------------------------------------------------------------------------------------------------------------
# Speed (--speed): model.onnx against Keras' own ONNX export and against a minimal hand-built graph, five stock models

SPEED_STEPS, VOCAB = 50, 5000
FUSED_TARGET, LOOP_TARGET_B1, LOOP_TARGET_B32, BOUND_TARGET = 1.0, 3.0, 1.0, 1.1
SERVING_KERAS_TARGET, SERVING_FORM_TARGET = 1.0, 1.1  # SavedModel / Keras' own, / the fastest single TF form


# the sizes of the five speed models: (LSTM units and embedding width of the language model, the seq2seq's units
# and features, the BiGRU's units, layers and features, the tagger's units (its embedding 64 wide in both), the
# masked GRU's units and features).
# SIZES is the set the loops were tuned on; HELD_OUT (--held-out) the same five kinds at other realistic sizes,
# never used to choose a form, to check that the targets hold beyond the tuned set
SIZES = {"lm": (256, 64), "seq2seq": (128, 32), "bigru": (96, 2, 32), "tagger": 128, "masked_gru": (128, 32)}
HELD_OUT = {"lm": (512, 128), "seq2seq": (256, 64), "bigru": (160, 3, 40), "tagger": 192, "masked_gru": (256, 80)}


def speed_models(sizes=None):
    """The five stock models of the speed table at ``sizes`` (:data:`SIZES` unless given, e.g. :data:`HELD_OUT`),
    the sizes users train them at (random weights, scale 0.1): {name saying its kind and sizes: (its key in SIZES,
    the model)}."""
    import keras

    L, out, size = keras.layers, {}, sizes or SIZES
    units, width = size["lm"]
    out[f"Emb -> LSTM({units}) x2 -> Dense"] = "lm", keras.Sequential(
        [keras.Input((None,), dtype="int32"), L.Embedding(VOCAB, width), L.LSTM(units, return_sequences=True),
         L.LSTM(units), L.Dense(10)])
    units, width = size["seq2seq"]
    enc, dec = keras.Input((None, width), name="enc"), keras.Input((None, width), name="dec")
    _, h, c = L.LSTM(units, return_state=True)(enc)
    out[f"LSTM({units}) encoder -> states -> decoder"] = "seq2seq", keras.Model(
        [enc, dec], L.Dense(width)(L.LSTM(units, return_sequences=True)(dec, initial_state=[h, c])))
    units, layers, width = size["bigru"]
    y = x = keras.Input((None, width), name="x")
    for _ in range(layers):
        y = L.Bidirectional(L.GRU(units, return_sequences=True))(y)
    out[f"Bidirectional(GRU({units})) x{layers}"] = "bigru", keras.Model(x, L.Dense(5)(y))
    ids = keras.Input((None,), dtype="int32", name="tokens")
    y = L.Bidirectional(L.LSTM(size["tagger"], return_sequences=True))(L.Embedding(VOCAB, 64, mask_zero=True)(ids))
    out[f"Emb(mask_zero) -> BiLSTM({size['tagger']}) tagger"] = "tagger", keras.Model(ids, L.Dense(9)(y))
    units, width = size["masked_gru"]
    x = keras.Input((None, width), name="x")
    out[f"Masking -> GRU({units})"] = "masked_gru", keras.Model(x, L.Dense(3)(L.GRU(units)(L.Masking()(x))))
    rng = np.random.default_rng(0)
    for _, model in out.values():
        model.set_weights([(rng.normal(size=w.shape) * 0.1).astype(w.dtype) for w in model.get_weights()])
    return out


def speed_feeds(model, batch):
    """Feeds by input name: batch 1 full length; batch 32 right-padded to lengths drawn in [10, 50] (zeros past)."""
    rng = np.random.default_rng(batch)
    lengths = np.full(batch, SPEED_STEPS) if batch == 1 else rng.integers(10, SPEED_STEPS + 1, size=batch)
    valid = np.arange(SPEED_STEPS)[None, :] < lengths[:, None]
    feeds = {}
    for t in model.inputs:
        name = t.name.split(":")[0]
        if len(t.shape) == 2:
            feeds[name] = (rng.integers(1, VOCAB, size=valid.shape) * valid).astype("int32")
        else:
            feeds[name] = (rng.normal(size=valid.shape + (t.shape[-1],)) * valid[..., None]).astype("float32")
    return feeds


class _Graph:
    """A few helpers to write an ONNX graph by hand."""

    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def const(self, array):
        from onnx import numpy_helper

        self.count += 1
        self.inits.append(numpy_helper.from_array(np.asarray(array), f"c{self.count}"))
        return f"c{self.count}"

    def __call__(self, op, inputs, outputs=1, **attrs):
        from onnx import helper

        self.count += 1
        names = [f"n{self.count}_{k}" for k in range(outputs)] if isinstance(outputs, int) else outputs
        self.nodes.append(helper.make_node(op, inputs, names, **attrs))
        return names[0] if len(names) == 1 else names

    def model(self, inputs, output, rank):
        import onnx
        from onnx import TensorProto, helper

        values = [helper.make_tensor_value_info(name, TensorProto.INT32 if ids else TensorProto.FLOAT,
                                                ["batch", "time"] + ([] if ids else [width]))
                  for name, ids, width in inputs]
        self.nodes.append(helper.make_node("Identity", [output], ["y"]))
        graph = helper.make_graph(self.nodes, "minimal", values,
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None if rank is None else
                                                                 [f"d{k}" for k in range(rank)])], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model.SerializeToString()


def _onnx_weights(layer):
    """W [D, G*H, I], R [D, G*H, H], B [D, 2*G*H] of a stock LSTM / GRU(reset_after) or a Bidirectional of one, in
    ONNX's gate order (LSTM: Keras i f c o -> ONNX i o f c; GRU: z r h in both)."""
    rnns = [layer.forward_layer, layer.backward_layer] if hasattr(layer, "forward_layer") else [layer]
    W, R, B = [], [], []
    for rnn in rnns:
        k, r, b = (v.numpy() for v in (rnn.cell.kernel, rnn.cell.recurrent_kernel, rnn.cell.bias))
        H = r.shape[0]
        if type(rnn).__name__ == "LSTM":
            order = np.concatenate([np.arange(g * H, (g + 1) * H) for g in (0, 3, 1, 2)])
            W.append(k[:, order].T), R.append(r[:, order].T), B.append(np.concatenate([b[order], 0 * b]))
        else:
            W.append(k.T), R.append(r.T), B.append(b.reshape(-1))
    return [np.stack(a).astype(np.float32) for a in (W, R, B)]


def _rnn(g, layer, x, lengths="", states=(), outputs=3):
    """One fused ONNX node for a stock layer: its outputs (Y [T, D, B, H], Y_h, Y_c)."""
    is_lstm = "LSTM" in type(getattr(layer, "forward_layer", layer)).__name__
    W, R, B = (g.const(a) for a in _onnx_weights(layer))
    attrs = dict(hidden_size=int(getattr(layer, "forward_layer", layer).units),
                 direction="bidirectional" if hasattr(layer, "forward_layer") else "forward")
    if not is_lstm:
        attrs["linear_before_reset"] = 1
    return g("LSTM" if is_lstm else "GRU", [x, W, R, B, lengths, *states], 3 if is_lstm else 2, **attrs)


def _seq(g, y, bidirectional):
    """Y [T, D, B, H] -> [T, B, D*H]."""
    if not bidirectional:
        return g("Squeeze", [y, g.const(np.array([1]))])
    return g("Reshape", [g("Transpose", [y], perm=[0, 2, 1, 3]), g.const(np.array([0, 0, -1]))])


def _dense(g, layer, x):
    return g("Add", [g("MatMul", [x, g.const(layer.kernel.numpy())]), g.const(layer.bias.numpy())])


def minimal_graph(kind, model):
    """The least ONNX graph of the same fused nodes as ``model`` (of ``kind``, its key in SIZES), written by hand: the
    bound an export of it can reach. Masked models take lengths from the ids / the non-zero rows (right-padded
    batches only), which onnxruntime honours as ``sequence_lens``."""
    g = _Graph()
    rnns = [layer for layer in model.layers if type(layer).__name__ in ("LSTM", "GRU", "Bidirectional")]
    dense = [layer for layer in model.layers if type(layer).__name__ == "Dense"][0]
    embedding = next((layer for layer in model.layers if type(layer).__name__ == "Embedding"), None)
    inputs = [(t.name.split(":")[0], len(t.shape) == 2, t.shape[-1]) for t in model.inputs]
    first = inputs[0][0]
    T = [1, 0, 2]
    if kind == "lm":
        x = g("Transpose", [g("Gather", [g.const(embedding.embeddings.numpy()), first])], perm=T)
        x = _seq(g, _rnn(g, rnns[0], x)[0], False)
        h = _rnn(g, rnns[1], x)[1]
        out = _dense(g, dense, g("Squeeze", [h, g.const(np.array([0]))]))
    elif kind == "seq2seq":
        _, h, c = _rnn(g, rnns[0], g("Transpose", [first], perm=T))
        y = _rnn(g, rnns[1], g("Transpose", [inputs[1][0]], perm=T), "", (h, c))[0]
        out = _dense(g, dense, g("Transpose", [_seq(g, y, False)], perm=T))
    elif kind == "bigru":
        x = g("Transpose", [first], perm=T)
        for layer in rnns:
            x = _seq(g, _rnn(g, layer, x)[0], True)
        out = _dense(g, dense, g("Transpose", [x], perm=T))
    elif kind == "tagger":
        valid = g("Not", [g("Equal", [first, g.const(np.array(0, np.int32))])])
        lengths = g("ReduceSum", [g("Cast", [valid], to=6), g.const(np.array([1]))], keepdims=0)
        x = g("Transpose", [g("Gather", [g.const(embedding.embeddings.numpy()), first])], perm=T)
        out = _dense(g, dense, g("Transpose", [_seq(g, _rnn(g, rnns[0], x, lengths)[0], True)], perm=T))
    else:  # masked_gru: Masking -> GRU
        rows = g("Not", [g("Equal", [first, g.const(np.array(0, np.float32))])])
        valid = g("ReduceMax", [g("Cast", [rows], to=6)], axes=[2], keepdims=0)
        lengths = g("ReduceSum", [valid, g.const(np.array([1]))], keepdims=0)
        h = _rnn(g, rnns[0], g("Transpose", [first], perm=T), lengths)[1]
        out = _dense(g, dense, g("Squeeze", [h, g.const(np.array([0]))]))
    return g.model(inputs, out, len(model.outputs[0].shape))


def fused_tf_saved_model(kind, model, folder):
    """For the unmasked LSTM models: a SavedModel of TensorFlow's own fused CPU LSTM kernel (``BlockLSTMV2``, the
    one sequence op TensorFlow runs on a CPU without XLA), the weights constants, written to ``folder``: the least a
    plain-ops SavedModel of the model can cost. None for the others: TensorFlow has no fused CPU GRU kernel, and
    BlockLSTMV2 takes one length for the whole batch."""
    import tensorflow as tf

    rnns = [layer for layer in model.layers if type(layer).__name__ == "LSTM"]
    if kind not in ("lm", "seq2seq"):
        return None
    dense = [layer for layer in model.layers if type(layer).__name__ == "Dense"][0]

    weights = []  # per LSTM: [I + H, 4H] and [4H], read here (eagerly); BlockLSTMV2's gate order is Keras' (IFCO)
    for layer in rnns:
        k, r, b = (v.numpy() for v in (layer.cell.kernel, layer.cell.recurrent_kernel, layer.cell.bias))
        weights.append((np.concatenate([k, r]), b))
    kernel, bias = dense.kernel.numpy(), dense.bias.numpy()

    def lstm(index, x, state=None):  # LSTM rnns[index] over x [T, B, I] -> (h [T, B, H], c [T, B, H])
        w, b = weights[index]
        H = b.shape[0] // 4
        zeros = tf.zeros([tf.shape(x)[1], H])
        h0, c0 = state if state is not None else (zeros, zeros)
        peep = tf.zeros([H])
        out = tf.raw_ops.BlockLSTMV2(seq_len_max=tf.cast(tf.shape(x)[0], tf.int64), x=x, cs_prev=c0, h_prev=h0,
                                     w=tf.constant(w), wci=peep, wcf=peep, wco=peep, b=tf.constant(b),
                                     cell_clip=0.0, use_peephole=False)
        return out[6], out[1]

    def head(y):
        return tf.matmul(y, tf.constant(kernel)) + tf.constant(bias)

    specs = [tf.TensorSpec([None] + list(t.shape[1:]), t.dtype, name=t.name.split(":")[0]) for t in model.inputs]
    if kind == "lm":
        table = next(v for v in model.layers if type(v).__name__ == "Embedding").embeddings.numpy()

        def call(ids):
            y, _ = lstm(0, tf.transpose(tf.gather(tf.constant(table), ids), [1, 0, 2]))
            return {"output_0": head(lstm(1, y)[0][-1])}
    else:
        def call(enc, dec):
            h, c = lstm(0, tf.transpose(enc, [1, 0, 2]))
            return {"output_0": tf.transpose(head(lstm(1, tf.transpose(dec, [1, 0, 2]), (h[-1], c[-1]))[0]),
                                             [1, 0, 2])}
    module = tf.Module()
    module.serve = tf.function(call, input_signature=specs)
    tf.saved_model.save(module, folder, signatures=module.serve.get_concrete_function())
    return folder


def _session(model):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    outs = [session.get_outputs()[0].name]

    def run(feeds):  # by name, else by position (Keras names a Sequential's input keras_tensor)
        values = [feeds[n] for n in names] if all(n in feeds for n in names) else list(feeds.values())
        return session.run(outs, dict(zip(names, values)))[0]

    return run


def _openvino(path):
    from cudnn_port.exports.openvino import compile_onnx

    compiled = compile_onnx(path)
    request = compiled.create_infer_request()
    return lambda feeds: request.infer(list(feeds.values()))[compiled.outputs[0]]


def _ratios(calls, repeat, rounds):
    """Median seconds of each call (alternating blocks, :func:`bench_exports.time_blocks`) and per-round medians."""
    from bench_exports import time_blocks

    return time_blocks(calls, repeat, rounds, per_round=True)


def speed(repeat, rounds, sizes=None):
    """One row per model and batch: ms of Keras' ONNX, ours and the minimal graph in onnxruntime (and ours and
    Keras' in OpenVINO where they load), the ratios and the targets they meet; the models at ``sizes``
    (:func:`speed_models`)."""
    import onnx

    import cudnn_port

    rows = []
    for name, (kind, model) in speed_models(sizes).items():
        with tempfile.TemporaryDirectory() as tmp:
            keras_path, out = os.path.join(tmp, "keras.onnx"), os.path.join(tmp, "out")
            inputs = list(speed_feeds(model, 1).values())
            model(inputs if len(inputs) > 1 else inputs[0])  # Keras exports only a model that was called
            model.export(keras_path, format="onnx", verbose=False)
            cudnn_port.export(model, out, formats=["saved_model", "onnx"])
            keras_ops = {n.op_type for n in onnx.load(keras_path).graph.node}
            fused = "Loop" not in keras_ops and "Scan" not in keras_ops
            ours_path = os.path.join(out, "model.onnx")
            nodes = {"keras": len(onnx.load(keras_path).graph.node), "ours": len(onnx.load(ours_path).graph.node)}
            minimal = minimal_graph(kind, model)
            nodes["minimal"] = len(onnx.load_from_string(minimal).graph.node) - 1
            runs = {"keras": _session(keras_path), "ours": _session(ours_path), "minimal": _session(minimal)}
            serving = _saved_model(os.path.join(out, "saved_model"))
            floor = _saved_model(_identity_saved_model(os.path.join(out, "saved_model"), tmp))
            model.export(os.path.join(tmp, "keras_saved_model"), format="tf_saved_model", verbose=False)
            keras_serving = _saved_model(os.path.join(tmp, "keras_saved_model"))
            fused_tf = fused_tf_saved_model(kind, model, os.path.join(tmp, "fused_tf"))
            fused_tf = fused_tf and _saved_model(fused_tf)
            vino = {}
            for key, path in (("ours", ours_path), ("keras", keras_path)):
                try:
                    vino[key] = _openvino(path)
                except Exception as e:  # noqa: BLE001 (a model OpenVINO refuses is a result)
                    vino[key] = _why(e)
            for batch in (1, 32):
                feeds = speed_feeds(model, batch)
                inputs = [feeds[t.name.split(":")[0]] for t in model.inputs]
                want = np.asarray(model(inputs if len(inputs) > 1 else inputs[0]))
                errors = {k: float(np.abs(run(feeds) - want).max()) for k, run in runs.items()}
                reps = repeat if batch == 1 else max(3, repeat // 5)
                keys = ["keras", "ours", "minimal"]
                tf_keys = ["saved_model", "saved_model_keras"] + ["saved_model_floor"] * (batch == 1) + \
                    ["saved_model_fused_tf"] * bool(fused_tf)
                # the SavedModels timed apart from the ONNX sessions: onnxruntime's threads slowed whichever
                # TensorFlow call came first after them (the seq2seq's ratio at batch 32: 1.16 timed first, 1.11 not)
                tf_calls = [(serving, feeds), (keras_serving, feeds)] + ([(floor, feeds)] if batch == 1 else [])
                for key, run in (("saved_model", serving), ("saved_model_keras", keras_serving)):
                    errors[key] = float(np.abs(np.asarray(run(feeds)["output_0"]) - want).max())
                if fused_tf:
                    errors["saved_model_fused_tf"] = float(np.abs(np.asarray(fused_tf(feeds)["output_0"]) - want).max())
                    tf_calls.append((fused_tf, feeds))
                medians, per_round = _ratios([(runs[k], feeds) for k in keys], reps, rounds)
                tf_medians, tf_rounds = _ratios(tf_calls, reps, rounds)
                ms = dict(zip(keys + tf_keys, (1e3 * m for m in medians + tf_medians)))
                rounds_of = dict(zip(keys + tf_keys, per_round + tf_rounds))
                keras_over_ours = [a / b for a, b in zip(per_round[0], per_round[1])]
                row = {"model": name, "batch": batch, "keras_writes": "fused" if fused else "Loop", "nodes": nodes,
                       "ms": ms, "max_err": errors, "keras_over_ours": ms["keras"] / ms["ours"],
                       "keras_over_ours_rounds": [min(keras_over_ours), max(keras_over_ours)],
                       "ours_over_minimal": ms["ours"] / ms["minimal"]}
                target = FUSED_TARGET if fused else (LOOP_TARGET_B1 if batch == 1 else LOOP_TARGET_B32)
                row["targets"] = {f"keras/ours >= {target}": row["keras_over_ours"] >= target,
                                  f"ours/minimal <= {BOUND_TARGET}": row["ours_over_minimal"] <= BOUND_TARGET}
                row["saved_model_over_onnx"] = ms["saved_model"] / ms["ours"]
                if batch == 1:
                    row["floor_over_onnx"] = ms["saved_model_floor"] / ms["ours"]
                if fused_tf:  # TensorFlow's fused LSTM kernel (BlockLSTMV2), one form for the whole model
                    row["fused_tf_over_onnx"] = ms["saved_model_fused_tf"] / ms["ours"]
                # the SavedModel against Keras' own tf_saved_model and against the fastest single TensorFlow form
                # built here (Keras' own, BlockLSTMV2's): medians of the ratios round by round, and their range
                forms = ["saved_model_keras"] + ["saved_model_fused_tf"] * bool(fused_tf)
                best = min(forms, key=lambda k: ms[k])
                for key, other in (("saved_model_over_keras", "saved_model_keras"), ("saved_model_over_best", best)):
                    each = [a / b for a, b in zip(rounds_of["saved_model"], rounds_of[other])]
                    row[key], row[key + "_rounds"] = float(np.median(each)), [min(each), max(each)]
                row["fastest_tf_form"] = best
                row["targets"][f"saved_model/keras saved_model <= {SERVING_KERAS_TARGET}"] = \
                    row["saved_model_over_keras"] <= SERVING_KERAS_TARGET
                row["targets"][f"saved_model/fastest TF form <= {SERVING_FORM_TARGET}"] = \
                    row["saved_model_over_best"] <= SERVING_FORM_TARGET
                row["openvino_ms"] = {}
                for key, run in vino.items():
                    if isinstance(run, str):
                        row["openvino_ms"][key] = f"does not load: {run}"
                        continue
                    run(feeds)
                    row["openvino_ms"][key] = 1e3 * _ratios([(run, feeds)], reps, 1)[0][0]
                rows.append(row)
                _progress(row)
        import keras

        keras.backend.clear_session()
    return rows


def _saved_model(path):
    import tensorflow as tf

    fn = tf.saved_model.load(path).signatures["serving_default"]
    names = sorted(fn.structured_input_signature[1])
    return lambda feeds: fn(**{n: tf.constant(v) for n, v in zip(names, _ordered(feeds, names))})


def _identity_saved_model(path, tmp):
    """A SavedModel whose serving signature takes the same inputs as ``path``'s and returns the first one: what any
    signature call costs in TensorFlow before it computes anything (the floor of the SavedModel / ONNX ratio)."""
    import tensorflow as tf

    specs = tf.saved_model.load(path).signatures["serving_default"].structured_input_signature[1]
    names = sorted(specs)
    module = tf.Module()
    module.serve = tf.function(lambda *args: {"output_0": tf.identity(args[0])},
                               input_signature=[tf.TensorSpec(specs[n].shape, specs[n].dtype, name=n) for n in names])
    floor = os.path.join(tmp, "identity")
    tf.saved_model.save(module, floor, signatures=module.serve.get_concrete_function())
    return floor


def _ordered(feeds, names):
    return [feeds[n] for n in names] if all(n in feeds for n in names) else list(feeds.values())


def _progress(row):
    print(f"  {row['model']}, batch {row['batch']}: keras/ours {row['keras_over_ours']:.2f}", file=sys.stderr)


def print_speed(rows):
    print("| model | batch | Keras writes | nodes Keras / ours / minimal | ms Keras / ours / minimal "
          "| Keras / ours (rounds) | ours / minimal | SavedModel / ONNX (TF floor, TF fused LSTM / ONNX) "
          "| SavedModel ms ours / Keras' own | ours / Keras' own SavedModel (rounds) | ours / fastest TF form "
          "| OpenVINO ms ours / Keras "
          "| targets |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ms, n, vino = r["ms"], r["nodes"], r["openvino_ms"]
        ov = " / ".join(f"{v:.2f}" if isinstance(v, float) else "no" for v in (vino["ours"], vino["keras"]))
        low, high = r["keras_over_ours_rounds"]
        met = ", ".join(f"{k}: {'met' if v else 'MISSED'}" for k, v in r["targets"].items())
        saved = f"{r['saved_model_over_onnx']:.2f} ({r['floor_over_onnx']:.2f}" if "floor_over_onnx" in r else \
            f"{r['saved_model_over_onnx']:.2f} (-"
        saved += f", {r['fused_tf_over_onnx']:.2f})" if "fused_tf_over_onnx" in r else ")"
        least, most = r["saved_model_over_keras_rounds"]
        vs_keras = f"{ms['saved_model']:.2f} / {ms['saved_model_keras']:.2f} | {r['saved_model_over_keras']:.2f} " \
            f"({least:.2f}-{most:.2f}) | {r['saved_model_over_best']:.2f} ({r['fastest_tf_form'][12:] or 'keras'})"
        print(f"| {r['model']} | {r['batch']} | {r['keras_writes']} | {n['keras']} / {n['ours']} / {n['minimal']} | "
              f"{ms['keras']:.2f} / {ms['ours']:.2f} / {ms['minimal']:.2f} | {r['keras_over_ours']:.2f} "
              f"({low:.2f}-{high:.2f}) | {r['ours_over_minimal']:.2f} | {saved} | {vs_keras} | {ov} | {met} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--speed", action="store_true", help="the speed table instead (see the module docstring)")
    parser.add_argument("--repeat", type=int, default=30, help="calls per block at batch 1 (a fifth at batch 32)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds per batch size")
    parser.add_argument("--held-out", action="store_true",
                        help="with --speed: the same five kinds of model at other sizes (HELD_OUT), not the tuned set")
    args = parser.parse_args(argv)
    if args.held_out and not args.speed:
        parser.error("--held-out goes with --speed")
    if args.speed:
        rows = speed(args.repeat, args.rounds, HELD_OUT if args.held_out else None)
        print(json.dumps(rows, indent=1)) if args.json else print_speed(rows)
        return 0 if all(all(r["targets"].values()) for r in rows) else 1
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
