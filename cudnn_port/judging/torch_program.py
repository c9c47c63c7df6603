"""The judge of a whole PyTorch program (a ``torch.export`` ``.pt2`` converted by
:mod:`cudnn_port.readers.torch_program`): PyTorch's own kernels, not the converter's translation.

:class:`Interpreter` runs the program's graph node by node with ``torch.ops.aten`` on CPU, from the archive's graph
JSON and its weights read as raw bytes with torch (``torch.frombuffer``, then each tensor's sizes, strides and offset
from the weights' JSON config); nothing of the archive is unpickled and ``torch.export.load`` never runs. It shares no
code with the translator: its own reading of the JSON, PyTorch's own ops, and its own rule for other lengths.

**Other lengths.** torch.export records a recurrent model at the one length it was exported at (it cannot keep an
RNN's time symbolic), so a few sizes in the graph are that length as a number (``view(x, [s0, 7, 4])``). The judge
runs the program at other lengths by value: in every ``size`` / ``shape`` argument, the exported length ``T0`` (the
recorded time size of the recurrent nodes' inputs) becomes the length run, and, where the batch was exported fixed
at ``B0``, ``B0`` and ``B0 * T0`` become ``B`` and ``B * T`` (verify then runs a batch other than ``B0``). A program
whose other sizes equal ``T0`` or ``B0`` may be judged wrongly by this rule, never passed wrongly: its rows fail.
The translator instead aligns each size with the shapes of the tensors it reshapes.

:func:`program_rows` is verify's check: every whole-model artifact in every runtime its format declares, at two
lengths other than the exported one, against the interpreter's outputs. Without torch, or without the source
unchanged where the manifest says, its rows say why and fail: a program that cannot be judged is never passed.
"""
import json
import math
import os
import zipfile
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Sequence

import numpy as np

from .artifact_rows import model_artifact_rows
from .parity import failed_row
from ..formats.jobs import ModelJob
from ..keras_models.model_inputs import from_records
from ..readers.zip_guard import check_members
from ..readers import translated_from
from ..readers.torch_program import PASSED, SIZE_OPS, SUPPORTED  # data: the ops convert translates
from ..readers.torchscript import is_script, read_script  # a TorchScript file's code as a graph, read as data

if TYPE_CHECKING:
    from ..manifest import Manifest

JUDGE = "PyTorch's own kernels (torch.ops.aten on CPU, node by node from the program's graph)"
RECURRENT_OPS = ("lstm", "gru", "rnn_tanh", "rnn_relu")
SIZE_ARGS = ("size", "shape")
# torch/_export/serde/schema.py ScalarType
DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32", 8: "float64",
          12: "bool", 13: "bfloat16"}


class Interpreter:
    """The ``.pt2`` at ``path``, run node by node with ``torch.ops.aten`` (see the module docstring)."""

    def __init__(self, path: str):
        # lazy: torch, loaded on first use (import cudnn_port stays light)
        import torch

        self.torch = torch
        if is_script(path):  # a TorchScript file: the graph its code reads as (never torch.jit.load)
            module, arrays = read_script(path)
            self.weights = {name: torch.from_numpy(np.array(a)) for name, a in arrays.items()}
        else:
            with zipfile.ZipFile(path) as z:
                check_members(z, path, "a torch.export archive holds one per weight")  # before anything inflates
                names = z.namelist()
                model = next(n for n in names if "/models/" in n and n.endswith(".json"))
                config = next(n for n in names if n.endswith("_weights_config.json"))
                graph = json.loads(z.read(model))
                entries = json.loads(z.read(config))
                entries = entries.get("config", entries)
                base = config[:config.index("data/weights/")]
                self.weights = {name: self._tensor(z, base + "data/weights/" + e["path_name"],
                                                   e.get("tensor_meta", e)) for name, e in entries.items()}
            module = graph.get("graph_module", graph)
        self.graph = module["graph"]
        self.placeholders, self.inputs = {}, []
        for spec in module["signature"]["input_specs"]:
            kind, entry = next(iter(spec.items()))
            if kind == "user_input":
                self.inputs.append(entry["arg"]["as_tensor"]["name"])
            else:
                self.placeholders[entry["arg"]["name"]] = entry.get("parameter_name") or entry.get("buffer_name")
        self.outputs = [next(iter(spec.values()))["arg"] for spec in module["signature"]["output_specs"]]
        self.recorded = {name: [self._size(s) for s in meta.get("sizes", [])]
                         for name, meta in self.graph.get("tensor_values", {}).items()}
        self.steps, self.batch = self._exported_sizes()

    def _tensor(self, z, member, meta):
        torch = self.torch
        dtype = getattr(torch, DTYPES[meta["dtype"]])
        raw = bytearray(z.read(member))
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        sizes = [self._size(s) for s in meta.get("sizes", [])]
        strides = [self._size(s) for s in meta.get("strides", [])]
        if math.prod(sizes) > flat.numel() + (1 << 20):  # strides of 0 spelling far more than is stored
            raise ValueError(f"{member} declares {math.prod(sizes)} elements over {flat.numel()} stored")
        return flat.as_strided(sizes, strides, self._size(meta.get("storage_offset", 0))).clone()

    @staticmethod
    def _size(value):
        if isinstance(value, int):
            return value
        if "as_int" in value:
            return value["as_int"]
        hint = value.get("as_expr", {}).get("hint")
        return None if hint is None else int(hint["as_int"] if isinstance(hint, dict) else hint)

    def _exported_sizes(self):
        """(T0, B0): the recorded time size of the recurrent nodes' inputs, and their batch size where the graph
        records it as a number (None where it is symbolic)."""
        steps, batch = None, None
        for node in self.graph["nodes"]:
            parts = node["target"].split(".")
            if len(parts) > 3 and parts[3] in RECURRENT_OPS:
                args = {i["name"]: i["arg"] for i in node["inputs"]}
                first = args.get("batch_first", {}).get("as_bool", False)
                meta = self.graph["tensor_values"][args["input"]["as_tensor"]["name"]]["sizes"]
                steps = self._size(meta[1 if first else 0])
                fixed = meta[0 if first else 1]
                batch = fixed.get("as_int") if isinstance(fixed, dict) else fixed
        return steps, batch

    def time_axes(self, name: str, free: Sequence[bool]) -> List[bool]:
        """Which of the free dims of user input ``name`` hold time: those recorded at the exported length."""
        recorded = self.recorded.get(name, [])
        return [bool(f) and i < len(recorded) and recorded[i] == self.steps for i, f in enumerate(free)]

    def vocabularies(self) -> Dict[str, int]:
        """{user input: rows of the embedding table it indexes} for the inputs an ``aten.embedding`` reads."""
        found = {}
        for node in self.graph["nodes"]:
            if node["target"].startswith("torch.ops.aten.embedding"):
                args = {i["name"]: i["arg"] for i in node["inputs"]}
                ids = args["indices"].get("as_tensor", {}).get("name")
                weight = args["weight"].get("as_tensor", {}).get("name")
                param = None if weight is None else self.placeholders.get(weight)
                table = None if param is None else self.weights.get(param)
                if ids in self.inputs and table is not None:
                    found[ids] = int(table.shape[0])
        return found

    def run(self, feeds: Dict[str, np.ndarray], steps: int, batch: int) -> List[np.ndarray]:
        """The program's user outputs on ``feeds`` ({input name: array}), run at ``steps`` steps and ``batch`` rows."""
        torch = self.torch
        env: Dict[str, Any] = {p: self.weights[fqn] for p, fqn in self.placeholders.items()}
        env.update({name: torch.from_numpy(np.ascontiguousarray(feeds[name])) for name in self.inputs})
        swap = {}
        if self.steps is not None:
            swap[self.steps] = steps
            # a batch exported fixed; a literal 1 is any dimension's, and the time entry is never overwritten
            if self.batch is not None and self.batch not in (1, self.steps):
                swap[self.batch], swap[self.batch * self.steps] = batch, batch * steps
        with torch.no_grad():
            for node in self.graph["nodes"]:
                self._node(node, env, swap)
        return [self._arg(o, env, {}).detach().numpy() for o in self.outputs]

    def _node(self, node, env, swap):
        torch = self.torch
        if node["target"] in SIZE_OPS:  # sizes' arithmetic (x.view(s * b, h)): a number of the exported length swapped
            a, b = (self._arg(inp["arg"], env, swap) for inp in node["inputs"])
            literal = ["as_int" in inp["arg"] or "as_int" in inp["arg"].get("as_sym_int", {}) for inp in node["inputs"]]
            env[node["outputs"][0]["as_sym_int"]["as_name"]] = (swap.get(a, a) if literal[0] else a) * (
                swap.get(b, b) if literal[1] else b)
            return
        parts = node["target"].split(".")
        if parts[:3] != ["torch", "ops", "aten"]:
            raise ValueError(f"node {node['name']} calls {node['target']}, which is not an ATen op")
        overload = parts[4] if len(parts) > 4 else "default"
        # only the pure ops convert translates (a list of names, shared as data): a crafted archive naming
        # aten.from_file, an in-place or an out= overload could reach files or memory outside it
        if parts[3] not in (*SUPPORTED, *PASSED, "sym_size") or parts[3].endswith("_") or overload.startswith("out"):
            raise ValueError(f"node {node['name']} calls {node['target']}, which no program convert translates "
                             "runs; the judge runs none of it")
        op = getattr(getattr(torch.ops.aten, parts[3]), overload)
        args, kwargs = [], {}
        for inp in node["inputs"]:
            value = self._arg(inp["arg"], env, swap if inp.get("name") in SIZE_ARGS else {})
            if inp.get("kind", 1) == 2:
                kwargs[inp["name"]] = value
            else:
                args.append(value)
        result = op(*args, **kwargs)
        outs = node.get("outputs", [])
        results = result if len(outs) > 1 else [result]
        for out, value in zip(outs, results):
            kind, v = next(iter(out.items()))
            if kind == "as_tensor":
                env[v["name"]] = value
            elif kind == "as_sym_int":
                env[v["as_name"]] = value
            elif kind == "as_tensors":
                for t, item in zip(v, value):
                    env[t["name"]] = item

    def _arg(self, arg, env, swap):
        """One argument of a node: a literal as it stands, any other kind decoded by ``DECODE``."""
        if not arg:
            return None
        kind, v = next(iter(arg.items()))
        if kind in LITERALS:
            return v
        if kind not in DECODE:
            raise ValueError(f"an argument of kind {kind}, which this judge does not read")
        return DECODE[kind](v, env, swap, self.torch)


def _listed_size(entry, env, swap):
    """A size in a list of sizes: a named one's value, a number swapped where it is the exported length."""
    return env[entry["as_name"]] if "as_name" in entry else swap.get(entry["as_int"], entry["as_int"])


# the serialized argument kinds (torch/_export/serde/schema.py Argument) read as they stand
LITERALS = ("as_int", "as_float", "as_bool", "as_string", "as_floats", "as_bools")
# every other kind the judge reads: kind -> f(entry, the values computed so far, the sizes swapped, torch); a size
# written as a number in a list of sizes is swapped, a lone symbolic size's literal is left to its node
DECODE: Dict[str, Callable[[Any, Dict[str, Any], Dict[int, int], Any], Any]] = {
    "as_none": lambda v, env, swap, torch: None,
    "as_tensor": lambda v, env, swap, torch: env[v["name"]],
    "as_tensors": lambda v, env, swap, torch: [env[t["name"]] for t in v],
    "as_optional_tensors": lambda v, env, swap, torch: [None if "as_none" in t else env[t["as_tensor"]["name"]]
                                                        for t in v],
    "as_ints": lambda v, env, swap, torch: [swap.get(i, i) for i in v],
    "as_sym_int": lambda v, env, swap, torch: env[v["as_name"]] if "as_name" in v else v["as_int"],
    "as_sym_ints": lambda v, env, swap, torch: [_listed_size(s, env, swap) for s in v],
    "as_scalar_type": lambda v, env, swap, torch: getattr(torch, DTYPES[v]),
    "as_device": lambda v, env, swap, torch: torch.device("cpu"),
    "as_layout": lambda v, env, swap, torch: torch.strided,
    "as_memory_format": lambda v, env, swap, torch: torch.contiguous_format,
}


def lengths_to_judge(exported: int) -> List[int]:
    """Two lengths other than the exported one: longer, and shorter where it can be."""
    return [exported + 4, exported - 3 if exported > 4 else exported + 2]


def program_rows(manifest: "Manifest", out: str, atol: float, rtol: float, seed: int, unchanged: bool,
                 say: Callable[[str], None]) -> List[Dict[str, Any]]:
    """verify's rows of a converted ``.pt2`` (none for other sources): every whole-model artifact at two lengths
    other than the exported one against :class:`Interpreter`; failed rows saying why where it cannot run."""
    if not translated_from(manifest.source.format):
        return []
    name = "whole model against PyTorch's kernels"
    path = manifest.source.checkpoint
    try:
        # lazy: torch, loaded on first use (import cudnn_port stays light)
        import torch  # noqa: F401
    except ImportError:
        return [_row(name, "not judged: PyTorch is not installed (pip install torch), and a PyTorch program is "
                     "judged by PyTorch's own kernels")]
    if not unchanged:
        return [_row(name, f"not judged: the source {os.path.basename(path)} is gone or changed since convert, and "
                     "the program is judged from it")]
    try:
        interpreter = Interpreter(path)
    except Exception as e:  # noqa: BLE001 (a program the judge cannot read is a failed check)
        return [dict(failed_row(name, e), stack="(whole model)", judge=None)]
    specs = from_records(manifest.model_input_specs)
    assert specs is not None  # convert records a program's input specs
    names = manifest.model_inputs or [s.name for s in specs]
    # each artifact input's program name (the forward's argument, which may not be a signature's: `_x` is `x` there)
    own = {r.name: r.program_name or r.name for r in manifest.model_input_specs or []}
    vocab = interpreter.vocabularies()
    rows = []
    for steps in lengths_to_judge(interpreter.steps or 7):
        # other than a batch exported fixed, too; a program exported at batch 1 is judged at 1 (its literal 1s are
        # every size-1 dimension's, so another batch cannot be told into its sizes)
        batch = 1 if interpreter.batch == 1 else 3 if interpreter.batch != 3 else 4
        rng = np.random.default_rng(seed + steps)
        feeds = {}
        for n, spec in zip(names, specs):
            dims = spec.shape.as_list()
            timed = interpreter.time_axes(own[n], [d is None for d in dims])
            shape = [steps if t else batch if d is None else d for d, t in zip(dims, timed)]
            dtype = spec.dtype.as_numpy_dtype
            if own[n] in vocab:
                feeds[n] = rng.integers(0, vocab[own[n]], size=shape).astype(dtype)
            elif spec.dtype.is_integer:
                feeds[n] = rng.integers(0, 4, size=shape).astype(dtype)
            else:
                feeds[n] = rng.normal(size=shape).astype(dtype)
        try:
            want = interpreter.run({own[n]: a for n, a in feeds.items()}, steps, batch)
        except Exception as e:  # noqa: BLE001
            rows.append(dict(failed_row(f"{name} at {steps} steps", e), stack="(whole model)", judge=None))
            continue
        job = ModelJob(None, specs, out, None, manifest=manifest, count=len(want))
        say(f"PyTorch's kernels at {steps} steps")
        for row in model_artifact_rows(out, job, feeds, want, atol, rtol, say):
            rows.append(dict(row, artifact=f"{row['artifact']} at {steps} steps", stack="(whole model)",
                             judge=JUDGE if row["passed"] is not None else None))
    return rows


def _row(name: str, why: str) -> Dict[str, Any]:
    """A row the judge could not judge: unjudged, so it fails unless the user accepts unjudged rows."""
    return {"artifact": name, "max_abs": None, "max_rel": None, "passed": None, "unjudged": True, "note": why,
            "stack": "(whole model)", "judge": None}

