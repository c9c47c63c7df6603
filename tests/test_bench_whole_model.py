"""bench walks the format registry for the whole-model road too: each whole-model artifact of a .keras export that
a format can run is timed at each batch size, beside the per-layer rows."""
import json
import os

import pytest

from conftest import ROOT

pytest.importorskip("tensorflow")
pytest.importorskip("onnxruntime")


@pytest.mark.slow
def test_bench_times_every_whole_model_artifact(tmp_path, capsys):
    from cudnn_port import cli, deps, formats

    out = tmp_path / "out"
    assert cli.main(["convert", os.path.join(ROOT, "models", "char_lm", "model.keras"), str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["bench", str(out), "--steps", "4", "--repeat", "1", "--json", "--quiet"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    whole = {(r["artifact"], r["batch"]) for r in rows if r["stack"] == "(whole model)"}
    runnable = [f.model.row for f in formats.on_road("model")
                if f.model.open is not None and all(deps.available(m) for m in f.model.needs)]
    assert len(runnable) >= 3  # saved_model, graphdef, onnx (and tflite where LiteRT is installed)
    assert whole == {(row, batch) for row in runnable for batch in (1, 32)}, whole
    assert all(r["latency_ms"] > 0 and r["steps"] == 4 for r in rows)
    assert any(r["stack"] == "lstm/opaque_kernel" for r in rows)  # the layer's rows are still there
