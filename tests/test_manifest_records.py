"""The values nested in manifest.json are typed records (cudnn_port.manifest_records on cudnn_port.record_base): a
real whole-model conversion's manifest.json, parsed by the json module alone, is the judge. Loaded, every nested value
is its record and every attribute equals the JSON value under its key; written back, the records give the same JSON,
byte for byte; a key the code does not declare is refused where a record is built, and one a newer version wrote is
carried; a manifest without manifest_version (version 1) loads into the same records; a damaged nested value is
refused in one line."""
import dataclasses
import json

import numpy as np
import pytest

from cudnn_port.errors import CudnnPortError
from cudnn_port.manifest import MANIFEST, Manifest, StackRecord, load_manifest
from cudnn_port.manifest_records import Int8Record, ModelLayerRecord, ParityRecord, SpecRecord, TensorSpecRecord
from cudnn_port.record_base import Record
from helpers import tagger

# the tagger's fused layers as built (tests/helpers.py): (layer, mode, layers, bidirectional, hidden, input size);
# the embedding is 6 wide, the LSTM's two directions 2 * 5 = 10
LAYERS = [("encoder", "lstm", 2, True, 5, 6), ("decoder", "gru", 1, False, 4, 10)]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(OUT, manifest.json's text) of the tagger (random N(0,1)*0.3 weights) exported whole, ONNX and its int8."""
    import cudnn_port

    folder = tmp_path_factory.mktemp("records")
    model = tagger(seed=11)
    model.save(str(folder / "model.keras"))
    out = folder / "out"
    cudnn_port.convert(str(folder / "model.keras"), str(out), formats=["onnx"], quantize="int8")
    return out, (out / MANIFEST).read_text()


def _same(record, raw, where):
    """Every field of ``record`` read by attribute equals ``raw`` (the JSON value) under its key, nested records
    recursively; fields absent from the JSON are None."""
    assert isinstance(raw, dict), where
    for field in dataclasses.fields(record):
        if field.name == "extra":
            assert record.extra == {k: v for k, v in raw.items()
                                    if k not in {f.name for f in dataclasses.fields(record)}}, where
            continue
        value, want = getattr(record, field.name), raw.get(field.name)
        if isinstance(value, Record):
            _same(value, want, f"{where}.{field.name}")
        elif isinstance(value, list) and value and isinstance(value[0], Record):
            assert len(value) == len(want), where
            for k, (item, item_raw) in enumerate(zip(value, want)):
                _same(item, item_raw, f"{where}.{field.name}[{k}]")
        elif isinstance(value, dict) and value and isinstance(next(iter(value.values())), Record):
            assert set(value) == set(want), where
            for key in value:
                _same(value[key], want[key], f"{where}.{field.name}[{key!r}]")
        elif isinstance(value, tuple) or (isinstance(value, list) and value and isinstance(value[0], tuple)):
            assert json.loads(json.dumps(value)) == want, f"{where}.{field.name}"
        else:
            assert value == want, f"{where}.{field.name}: {value!r} != {want!r}"


def test_a_converted_manifest_loads_into_typed_records_that_read_as_its_json(converted):
    out, text = converted
    raw = json.loads(text)
    manifest = load_manifest(out)
    assert isinstance(manifest.parity, ParityRecord) and manifest.parity.passed is True and manifest.parity.rows
    assert all(isinstance(s.spec, SpecRecord) for s in manifest.stacks)
    assert all(isinstance(r, TensorSpecRecord) for r in manifest.model_input_specs + manifest.model_output_specs)
    assert all(isinstance(r, ModelLayerRecord) for r in manifest.model_layers)
    assert manifest.int8 and all(isinstance(r, Int8Record) for r in manifest.int8)
    _same(manifest, raw, "manifest")
    # what the model is, not what the manifest says: each fused layer's spec as the tagger built it
    got = [(r.layer, r.spec.mode, r.spec.num_layers, r.spec.bidirectional, r.spec.num_units, r.spec.input_size)
           for r in manifest.model_layers]
    assert got == LAYERS
    assert [(r.name, r.dtype, r.shape) for r in manifest.model_input_specs] == [("tokens", "int32", [None, None])]
    assert [(r.name, r.shape) for r in manifest.model_output_specs] == [("output_0", [None, None, 3])]
    # the parity rows are model_parity.json's, artifact for artifact
    report = json.loads((out / "model_parity.json").read_text())
    assert [list(row) for row in manifest.parity.rows] == [[r["artifact"], r["max_abs"], r["passed"]]
                                                          for r in report["rows"]]
    assert max(row[1] for row in manifest.parity.rows) < 1e-5  # float32 against the float64 reference
    for record in manifest.int8:  # each int8 file: its bytes as recorded, smaller than the float32 one's
        assert (out / record.artifact).stat().st_size == record.bytes["int8"] < record.bytes["float32"]
        assert record.quantized.get("LSTM", 0) + record.quantized.get("MatMul", 0) > 0, record.to_dict()


def test_the_records_write_back_the_same_json_byte_for_byte(converted, tmp_path):
    out, text = converted
    manifest = load_manifest(out)
    assert json.dumps(manifest.to_dict(), indent=2) == text
    old = json.loads(text)  # the same manifest without manifest_version: version 1's layout
    del old["manifest_version"]
    (tmp_path / MANIFEST).write_text(json.dumps(old))
    back = load_manifest(tmp_path)
    assert back.manifest_version == 1 and back.to_dict() == dict(old, manifest_version=1)
    assert back.model_layers == manifest.model_layers and back.parity == manifest.parity
    assert back.model_layers[0].spec.num_units == LAYERS[0][4]


def test_a_key_no_record_declares_is_refused_where_code_builds_one_and_carried_where_a_manifest_holds_it(
        converted, tmp_path):
    out, text = converted
    manifest = load_manifest(out)
    raw = json.loads(text)
    with pytest.raises(KeyError, match="'max_rel' is not a field of ParityRecord; declare it in "
                                       "cudnn_port/manifest_records.py"):
        manifest["parity"] = dict(raw["parity"], max_rel=0.5)
    assert manifest.parity.to_dict() == raw["parity"]  # nothing of it was set
    with pytest.raises(KeyError, match="'units' is not a field of SpecRecord"):
        StackRecord(variable="rnn/opaque_kernel", prefix="rnn", label="rnn", spec=dict(raw["stacks"][0]["spec"],
                                                                                        units=5))
    with pytest.raises(KeyError, match="'batch' is not a field of TensorSpecRecord"):
        TensorSpecRecord.of(dict(raw["model_input_specs"][0], batch=4))
    with pytest.raises(KeyError, match="'surprise' is not a field of Manifest"):
        manifest["surprise"] = 1
    # a newer cudnn-port's key inside a nested value: read into that record's extra and written back unchanged
    newer = json.loads(text)
    newer["model_layers"][1]["from_the_future"] = {"a": 1}
    newer["stacks"][0]["spec"]["from_the_future"] = [2]
    (tmp_path / MANIFEST).write_text(json.dumps(newer, indent=2))
    back = load_manifest(tmp_path)
    assert back.model_layers[1].extra == {"from_the_future": {"a": 1}} and back.stacks[0].spec.extra == {
        "from_the_future": [2]}
    assert json.dumps(back.to_dict(), indent=2) == json.dumps(newer, indent=2)


def test_a_dict_built_into_a_record_reads_by_attribute_and_by_key(tmp_path):
    """Code that builds a record from its JSON form gets the record; users of the JSON form keep ``["key"]``,
    ``in`` and ``==`` with the dict."""
    rng = np.random.default_rng(5)
    spec = {"mode": "gru", "num_layers": int(rng.integers(1, 4)), "num_units": int(rng.integers(5, 9)),
            "input_size": int(rng.integers(10, 20)), "bidirectional": True, "dtype": "float32", "num_proj": 0,
            "reset_after": False}
    manifest = Manifest()
    manifest["model_layers"] = [{"layer": "g", "type": "GRU", "cell": [0, 1], "spec": spec, "stack": "g/opaque"}]
    layer = manifest.model_layers[0]
    assert isinstance(layer, ModelLayerRecord) and isinstance(layer.spec, SpecRecord)
    assert layer.spec.num_units == spec["num_units"] and layer["spec"]["input_size"] == spec["input_size"]
    assert layer.spec == spec and "direction" not in layer and layer.cell == [0, 1]
    assert manifest.to_dict()["model_layers"] == [{"layer": "g", "type": "GRU", "cell": [0, 1], "spec": spec,
                                                   "stack": "g/opaque"}]


@pytest.mark.parametrize("change", [
    lambda raw: raw.update(parity=[True]),  # a record's place holding a list
    lambda raw: raw["model_layers"][0].pop("spec"),  # a record without a field it must have
    lambda raw: raw["stacks"][0].update(spec="lstm"),
], ids=["parity-a-list", "layer-without-spec", "spec-a-string"])
def test_a_damaged_nested_value_is_refused_in_one_line(converted, tmp_path, change):
    raw = json.loads(converted[1])
    change(raw)
    (tmp_path / MANIFEST).write_text(json.dumps(raw))
    with pytest.raises(CudnnPortError) as e:
        load_manifest(tmp_path)
    assert "damaged (not the fields of a manifest)" in str(e.value) and "\n" not in str(e.value)
