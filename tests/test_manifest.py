"""OUT/manifest.json is one typed record (cudnn_port.manifest): written and read back field for field, a manifest
of the untyped layout (no manifest_version, as cudnn-port 0.2.0 wrote it) still loads, and a newer or damaged one is
refused with one line."""
import json

import pytest

from cudnn_port.errors import CudnnPortError
from cudnn_port.manifest import (MANIFEST, MANIFEST_VERSION, Manifest, StackRecord, load_manifest, new_manifest,
                                 save_manifest)

# a stack's spec as RNNSpec.to_dict writes it
GRU = {"mode": "gru", "num_layers": 2, "num_units": 5, "input_size": 3, "bidirectional": True}

# the head of a manifest as cudnn-port 0.2.0 wrote it (convert models/tf1_bilstm/model.ckpt), trimmed
VERSION_1 = {"tool": "cudnn-port", "version": "0.2.0", "created": "2026-11-26T03:05:45+00:00",
             "source": {"checkpoint": "models/tf1_bilstm/model.ckpt", "format": "name-based (TF1)",
                        "files": {"model.ckpt.index": "4e43"}, "names": "names kept as they are"},
             "style": "tf1", "formats": ["checkpoint", "onnx"],
             "stacks": [{"variable": "cudnn_lstm/opaque_kernel", "prefix": "cudnn_lstm", "label": "cudnn_lstm",
                         "spec": {"mode": "lstm", "num_layers": 2, "num_units": 48, "input_size": 32,
                                  "bidirectional": True, "dtype": "float32", "num_proj": 0},
                         "param_count": 87552, "spec_source": "chosen by clues", "targets": ["k", "b"], "slots": {},
                         "artifacts": {"onnx": "model.onnx"}, "scheme": "cudnn_compatible"}],
             "model_artifacts": {}, "name_map": {"x": ["x"]}, "copied": ["x"], "warnings": [], "files": {"a": "0"}}


def test_a_written_manifest_reads_back_field_for_field(tmp_path):
    manifest = new_manifest(str(tmp_path / "absent.ckpt"), "name-based (TF1)", "names kept", ["onnx"], "tf1")
    manifest.stacks.append(StackRecord(variable="rnn/opaque_kernel", prefix="rnn", label="rnn",
                                       spec=GRU, artifacts={"onnx": "model.onnx"}))
    manifest.stacks[0]["scheme"] = "keras"  # a road's own field: written at the top level of its record
    manifest["name_map"] = {"rnn/opaque_kernel": ["rnn/kernel"]}
    save_manifest(manifest, str(tmp_path), {"model.onnx": "ab" * 32})
    raw = json.loads((tmp_path / MANIFEST).read_text())
    assert raw["manifest_version"] == MANIFEST_VERSION and raw["tool"] == "cudnn-port"
    assert raw["stacks"][0]["scheme"] == "keras" and raw["name_map"] == {"rnn/opaque_kernel": ["rnn/kernel"]}
    back = load_manifest(tmp_path)
    assert isinstance(back, Manifest) and back.to_dict() == raw
    assert back.stacks[0].artifacts == {"onnx": "model.onnx"} and back.files == {"model.onnx": "ab" * 32}
    assert back.kind == "weights" and back.source.format == "name-based (TF1)"


def test_a_version_1_manifest_still_loads(tmp_path):
    (tmp_path / MANIFEST).write_text(json.dumps(VERSION_1))
    manifest = load_manifest(tmp_path)
    assert manifest.manifest_version == 1
    assert manifest.stacks[0].spec["num_units"] == 48 and manifest.stacks[0]["scheme"] == "cudnn_compatible"
    assert manifest.source.files == {"model.ckpt.index": "4e43"} and manifest["copied"] == ["x"]
    assert manifest.to_dict() == dict(VERSION_1, manifest_version=1, kind="weights")


@pytest.mark.parametrize("change, words", [
    ({"manifest_version": MANIFEST_VERSION + 1}, "manifest_version"),
    ({"manifest_version": "2"}, "manifest_version"),
    ({"stacks": {"a": 1}}, "damaged (stacks is not a list)"),
    ({"stacks": [{"prefix": "no variable"}]}, "damaged (not the fields of a manifest)"),
], ids=["newer", "not-a-number", "stacks-not-a-list", "stack-without-fields"])
def test_a_newer_or_damaged_manifest_is_refused_in_one_line(tmp_path, change, words):
    (tmp_path / MANIFEST).write_text(json.dumps(dict(VERSION_1, **change)))
    with pytest.raises(CudnnPortError) as e:
        load_manifest(tmp_path)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_not_ours_is_refused(tmp_path):
    (tmp_path / MANIFEST).write_text(json.dumps({"tool": "something else"}))
    with pytest.raises(CudnnPortError, match="not a cudnn-port output"):
        load_manifest(tmp_path)


def test_road_fields_are_absent_until_set_and_unknown_keys_are_carried_not_written(tmp_path):
    """A road's field (``nodes``) is absent from the JSON and from ``in`` until its road sets it; a key this version
    does not know (a newer cudnn-port's) is read into ``extra`` and written back unchanged; code cannot set one."""
    manifest = new_manifest(str(tmp_path / "absent.ckpt"), "name-based (TF1)", "names kept", ["onnx"], "tf1")
    assert "nodes" not in manifest and manifest.get("nodes", "none") == "none" and "nodes" not in manifest.to_dict()
    with pytest.raises(KeyError):
        manifest["nodes"]
    manifest["nodes"] = []
    assert "nodes" in manifest and manifest.to_dict()["nodes"] == []
    with pytest.raises(KeyError, match="not a field of Manifest"):
        manifest["from_the_future"] = 1
    (tmp_path / MANIFEST).write_text(json.dumps(dict(VERSION_1, manifest_version=MANIFEST_VERSION,
                                                     from_the_future={"a": 1})))
    back = load_manifest(tmp_path)
    assert back.extra == {"from_the_future": {"a": 1}} and back.to_dict()["from_the_future"] == {"a": 1}
    assert back["name_map"] == {"x": ["x"]} and back.stacks[0].scheme == "cudnn_compatible" and not back.stacks[0].extra


def test_record_takes_fields_and_a_formats_declared_keys_and_refuses_any_other_before_merging(tmp_path):
    """What a format's writer returns: the record's own fields set, the keys the format declares its own
    (``Format.records``) carried in ``extra`` and written out, and an undeclared key refused whole, naming the fix,
    with nothing of the same details merged."""
    manifest = new_manifest(str(tmp_path / "absent.ckpt"), "name-based (TF1)", "names kept", ["onnx"], "tf1")
    manifest.record({"onnx_signature": "serving_default", "toy_tar": "saved_model"}, own=("toy_tar",))
    assert manifest.onnx_signature == "serving_default" and manifest.extra == {"toy_tar": "saved_model"}
    assert manifest.to_dict()["toy_tar"] == "saved_model" and manifest.to_dict()["onnx_signature"] == "serving_default"
    with pytest.raises(KeyError, match="'toy_arrays' is not a field of Manifest nor a key its format declares; "
                                       "declare it in cudnn_port/manifest.py, or in the format's records="):
        manifest.record({"onnx_part": "the numeric part", "toy_arrays": 16})
    assert manifest.onnx_part is None and "toy_arrays" not in manifest and "onnx_part" not in manifest.to_dict()
    stack = StackRecord(variable="rnn/opaque_kernel", prefix="rnn", label="rnn", spec=GRU)
    stack.record({"graphdef_nodes": {"inputs": ["x:0"], "outputs": ["y:0"]}})
    assert stack.graphdef_nodes == {"inputs": ["x:0"], "outputs": ["y:0"]} and not stack.extra
    with pytest.raises(KeyError, match="'onnx_signature' is not a field of StackRecord"):
        stack.record({"onnx_signature": "serving_default"})  # a field of the Manifest, not of a stack's record


@pytest.mark.parametrize("road, kind", [("stack", "weights"), ("model", "keras_model"), ("graph", "saved_model")])
def test_the_manifest_records_its_road_in_the_words_every_earlier_version_wrote(tmp_path, road, kind):
    """The code asks ``manifest.road`` (the registry's words); the JSON keeps ``kind`` as cudnn-port 0.2.0 wrote it
    (the words below are the published layout, not read from the code), both ways, and a kind this version does not
    know has no road rather than a wrong one."""
    manifest = new_manifest(str(tmp_path / "absent"), "f", "names kept", ["onnx"], road=road)
    save_manifest(manifest, str(tmp_path), {})
    assert json.loads((tmp_path / MANIFEST).read_text())["kind"] == kind
    assert load_manifest(tmp_path).road == road
    (tmp_path / MANIFEST).write_text(json.dumps(dict(VERSION_1, kind=kind)))
    assert load_manifest(tmp_path).road == road
    manifest.road = "stack"
    assert manifest.to_dict()["kind"] == "weights"
    (tmp_path / MANIFEST).write_text(json.dumps(dict(VERSION_1, kind="from_the_future")))
    assert load_manifest(tmp_path).road is None
