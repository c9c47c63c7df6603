"""The whole-model ONNX graph's shape, not its speed (bench/bench_stock_keras.py --speed times it): an unmasked model
computes no sequence lengths and feeds its fused nodes no ``sequence_lens``; a mask read by several layers is turned
into lengths once; states pass between layers without reshuffling; and each model of the speed bench stays within
a stated node count (Keras' own export of the same models: 35, 22, 79, 102 and 58 nodes). Every graph is also run in
onnxruntime against Keras' outputs (1e-5 + 1e-4 relative), so a lean graph is a right one."""
import collections

import numpy as np
import pytest

keras = pytest.importorskip("keras")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import cudnn_port  # noqa: E402

L = keras.layers
# what computing or applying lengths takes (a sequence mask is Range + Less; Keras' Embedding has a Less of its own,
# for negative ids, so Less is not in the list)
LENGTH_OPS = {"Range", "CumSum", "ReduceSum", "ReverseSequence", "GatherElements", "GatherND"}


def _weights(model, seed=0):
    rng = np.random.default_rng(seed)
    model.set_weights([(rng.normal(size=w.shape) * 0.3).astype(w.dtype) for w in model.get_weights()])
    return model


def models():
    """The speed bench's five models (bench/bench_stock_keras.py), small, plus a stack of masked layers."""
    out = {}
    out["lm"] = keras.Sequential([keras.Input((None,), dtype="int32"), L.Embedding(40, 6),
                                  L.LSTM(8, return_sequences=True), L.LSTM(8), L.Dense(3)])
    enc, dec = keras.Input((None, 5), name="enc"), keras.Input((None, 5), name="dec")
    _, h, c = L.LSTM(7, return_state=True)(enc)
    out["seq2seq"] = keras.Model([enc, dec], L.Dense(5)(L.LSTM(7, return_sequences=True)(dec, initial_state=[h, c])))
    x = keras.Input((None, 5), name="x")
    y = L.Bidirectional(L.GRU(6, return_sequences=True))(L.Bidirectional(L.GRU(6, return_sequences=True))(x))
    out["bigru"] = keras.Model(x, L.Dense(2)(y))
    ids = keras.Input((None,), dtype="int32", name="tokens")
    y = L.Bidirectional(L.LSTM(6, return_sequences=True))(L.Embedding(40, 5, mask_zero=True)(ids))
    out["tagger"] = keras.Model(ids, L.Dense(4)(y))
    out["masking_gru"] = keras.Model(x, L.Dense(3)(L.GRU(6)(L.Masking()(x))))
    y = L.Bidirectional(L.GRU(5, return_sequences=True))(L.LSTM(6, return_sequences=True)(
        L.Embedding(40, 5, mask_zero=True)(ids)))
    out["masked_stack"] = keras.Model(ids, L.Dense(3)(L.LSTM(4)(y)))
    return {name: _weights(model, k) for k, (name, model) in enumerate(out.items())}


NODE_BOUND = {"lm": 17, "seq2seq": 15, "bigru": 23, "tagger": 106, "masking_gru": 86}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = {}
    for name, model in models().items():
        folder = tmp_path_factory.mktemp(name)
        cudnn_port.export(model, folder / "out", formats=["onnx"])
        model_proto = onnx.load(str(folder / "out" / "model.onnx"))
        out[name] = (model, _unguarded(model_proto), str(folder / "out" / "model.onnx"))
    return out


def _unguarded(model_proto):
    """The graph's nodes less the guard at its inputs and outputs against empty batches and zero-length input
    (:mod:`cudnn_port.exports.onnx_guard`: a fixed number of nodes per input and output, no length computed per
    layer), which the shape and node counts here leave out; the runs below keep it."""
    from cudnn_port.exports.onnx_guard import PREFIX

    nodes = [n for n in model_proto.graph.node if not n.name.startswith(PREFIX)]
    assert len(nodes) < len(model_proto.graph.node), "no empty-batch guard"
    del model_proto.graph.node[:]
    model_proto.graph.node.extend(nodes)
    return model_proto


def _feeds(model, seed=1):
    """Right-padded, ragged (lengths 7, 2, 5); ids 1.. at valid steps, 0 past; features N(0, 1), 0 past."""
    rng, lengths = np.random.default_rng(seed), np.array([7, 2, 5])
    valid = np.arange(7)[None, :] < lengths[:, None]
    feeds = {}
    for t in model.inputs:
        name = t.name.split(":")[0]
        if len(t.shape) == 2:
            feeds[name] = (rng.integers(1, 40, size=valid.shape) * valid).astype("int32")
        else:
            feeds[name] = (rng.normal(size=valid.shape + (t.shape[-1],)) * valid[..., None]).astype("float32")
    return feeds


@pytest.mark.parametrize("name", sorted(NODE_BOUND) + ["masked_stack"])
def test_graph_runs_like_keras(exported, name):
    model, _, path = exported[name]
    feeds = _feeds(model)
    values = list(feeds.values())
    want = np.asarray(model(values if len(values) > 1 else values[0]))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    inputs = [i.name for i in session.get_inputs()]
    got = session.run(["output_0"], dict(zip(inputs, values)))[0]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["lm", "seq2seq", "bigru"])
def test_unmasked_model_computes_no_lengths(exported, name):
    graph = exported[name][1].graph
    ops = collections.Counter(n.op_type for n in graph.node)
    assert not LENGTH_OPS & set(ops), ops
    fused = [n for n in graph.node if n.op_type in ("LSTM", "GRU")]
    assert fused and all(len(n.input) < 5 or n.input[4] == "" for n in fused), "a fused node reads sequence_lens"
    assert not any(n.op_type == "Concat" and any("with_pad" in o for o in n.output) for n in graph.node)


def test_seq2seq_passes_states_straight_from_encoder_to_decoder(exported):
    graph = exported["seq2seq"][1].graph
    encoder, decoder = [n for n in graph.node if n.op_type == "LSTM"]
    assert list(decoder.input[5:7]) == list(encoder.output[1:3])  # Y_h, Y_c straight into initial_h, initial_c
    assert encoder.output[0] == ""  # the encoder's sequence output, unread, is not written


def test_a_mask_read_by_several_layers_becomes_lengths_once(exported):
    graph = exported["masked_stack"][1].graph
    ops = collections.Counter(n.op_type for n in graph.node)
    assert ops["LSTM"] + ops["GRU"] == 3 and ops["CumSum"] == 1, ops  # three layers, one compaction plan


@pytest.mark.parametrize("name", sorted(NODE_BOUND))
def test_node_count_stays_within_its_bound(exported, name):
    count = len(exported[name][1].graph.node)
    assert count <= NODE_BOUND[name], f"{name}: {count} nodes, bound {NODE_BOUND[name]}"


def test_the_graph_passes_keep_what_a_branch_reads():
    """The two clean-up passes over tf2onnx's graph keep a tensor that only an If branch reads: the Squeeze that
    undoes an Unsqueeze, and an LSTM's Y_h (its Y, read nowhere, is dropped). Judged by the graph before the passes,
    run in onnxruntime on random weights and inputs: both branches give the same numbers after them."""
    from onnx import TensorProto as T, helper as h, numpy_helper

    from cudnn_port.exports.onnx_passes import squeeze_pairs_cancelled, unread_outputs_dropped

    def branch(name, reads):
        return h.make_graph([h.make_node("Identity", [reads], [f"{name}_out"])], name, [],
                            [h.make_tensor_value_info(f"{name}_out", T.FLOAT, [])])

    rng = np.random.default_rng(3)
    nodes = [h.make_node("Unsqueeze", ["A", "axis"], ["B"]), h.make_node("Squeeze", ["B", "axis"], ["C"]),
             h.make_node("LSTM", ["X", "W", "R"], ["Y", "Yh"], hidden_size=2),
             h.make_node("If", ["cond"], ["out"], then_branch=branch("then", "C"), else_branch=branch("other", "Yh"))]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "axis"),
             numpy_helper.from_array(rng.normal(size=(1, 8, 3)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.normal(size=(1, 8, 2)).astype(np.float32), "R")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("A", T.FLOAT, [1, 2]),
                                      h.make_tensor_value_info("X", T.FLOAT, [4, 1, 3]),
                                      h.make_tensor_value_info("cond", T.BOOL, [])],
                         [h.make_tensor_value_info("out", T.FLOAT, [])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"A": rng.normal(size=(1, 2)).astype(np.float32), "X": rng.normal(size=(4, 1, 3)).astype(np.float32)}
    before = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = [before.run(None, dict(feeds, cond=np.array(c)))[0] for c in (True, False)]
    squeeze_pairs_cancelled(model.graph)
    unread_outputs_dropped(model.graph)
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ["Unsqueeze", "Squeeze", "LSTM", "If"]
    assert list(model.graph.node[2].output) == ["", "Yh"]
    after = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for c, w in zip((True, False), want):
        np.testing.assert_array_equal(after.run(None, dict(feeds, cond=np.array(c)))[0], w)
