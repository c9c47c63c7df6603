"""Each whole-model or graph-road artifact of OUT run through every runtime its format declares, and judged: one row
per (artifact, runtime), in registry order. The judge's outputs come from the caller (:mod:`.model_rows`); a runtime
that is not installed is a skipped row, an artifact that fails to run a failed one."""
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from .. import deps, formats as registry
from ..formats.jobs import GraphCheck, Job, ModelJob, Outputs
from .graph_inputs import could_not_run
from .parity import compare, failed_row, skipped_row

if TYPE_CHECKING:
    import numpy as np


def model_artifact_rows(out: str, job: ModelJob, feeds: Dict[str, "np.ndarray"], want: List["np.ndarray"],
                        atol: float, rtol: float, say: Callable[[str], None]) -> List[Dict[str, Any]]:
    """A row per whole-model artifact of ``job.manifest`` that a format can run: its outputs on ``feeds`` against
    ``want`` (an artifact that fails to run: a failed row; a runtime that is not installed: a skipped row)."""
    job.count = len(want)
    names = [f"output_{i}" for i in range(len(want))]
    assert job.manifest is not None  # a job being judged carries OUT's manifest
    return _runner_rows("model", out, job.manifest.model_artifacts, job, feeds, say,
                        lambda row, got: compare(row, got.ordered(names), want, atol, rtol),
                        lambda row, needs, e: failed_row(row, e))


def graph_artifact_rows(job: GraphCheck, feeds: Dict[str, "np.ndarray"], want: Dict[str, "np.ndarray"],
                        judge_key: Optional[str], atol: float, rtol: float, say: Callable[[str], None],
                        half: str = "", valid: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None
                        ) -> List[Dict[str, Any]]:
    """A row per artifact of a converted SavedModel (``job``) that a format on the graph road runs: the signature's
    outputs on ``feeds`` against ``want`` ({output name: array}, the judge's), at the user's tolerance; at the
    larger float16 one its runtime states (an ONNX that computes in float16) only where the source computes in
    float16 (``half`` says why, from the source: :func:`.original.computes_in_float16`), never because the artifact
    does. ``valid``: what both the outputs and the judge's pass through before they are compared (the valid steps
    of a padded row, where the original defines its padding otherwise than cuDNN). The artifact ``judge_key`` has no
    row here (the converted SavedModel: each of its signatures has its own
    row, :func:`.model_rows.saved_model_rows`)."""
    cut = valid or (lambda values: values)
    judged = cut(want)

    def judge(row, got):
        names, values = sorted(judged), cut(got.values)
        if set(values) != set(names):
            return {"artifact": row, "max_abs": None, "max_rel": None, "passed": False,
                    "note": f"outputs {sorted(values)}, the judge's {names}"}
        floor = half and (got.atol > atol or got.rtol > rtol)
        note = f"the source computes in float16 ({half}): atol {max(atol, got.atol):g}, rtol {max(rtol, got.rtol):g}"
        note = "; ".join(filter(None, [note if floor else "", "valid steps of the padded row" if valid else ""]))
        return compare(row, [values[n] for n in names], [judged[n] for n in names],
                       max(atol, got.atol) if floor else atol, max(rtol, got.rtol) if floor else rtol,
                       note="; ".join(filter(None, [got.note, note])))

    def fail(row, needs, error):
        return could_not_run(row, {"tensorflow": "TensorFlow"}.get(needs[0], needs[0]) if needs else "it", error)

    assert job.manifest is not None  # a job being judged carries OUT's manifest
    arts = {k: v for k, v in job.manifest.model_artifacts.items() if k != judge_key}
    return _runner_rows("graph", job.out, arts, job, feeds, say, judge, fail)


def _runner_rows(road: str, out: str, arts: Dict[str, str], job: Job, feeds: Dict[str, "np.ndarray"],
                 say: Callable[[str], None], judge: Callable[[str, Outputs], Dict[str, Any]],
                 fail: Callable[[str, Tuple[str, ...], BaseException], Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Each artifact of ``arts`` ({key: path in OUT}) run through every runtime its format declares on ``road``,
    in registry order; ``judge(row name, outputs)`` makes the row, ``fail(row name, the runtime's needs, error)``
    the failed row of one that raises; a runtime that is not installed is a skipped row."""
    rows = []
    for fmt in registry.on_road(road):
        part = getattr(fmt, road)
        for artifact in part.artifacts:
            for row, open_, needs in (part.runners() if artifact.key in arts else ()):
                row = row.format(signature=getattr(job, "signature", ""))
                missing = [m for m in needs if not deps.available(m)]
                if missing:
                    rows.append(skipped_row(row, f"{missing[0]} is not installed "
                                                 f"({deps.EXTRAS.get(missing[0], 'pip install ' + missing[0])})"))
                    continue
                say(f"parity: {row}")
                try:
                    rows.append(judge(row, open_(os.path.join(out, arts[artifact.key]), job)(feeds)))
                except Exception as e:  # noqa: BLE001 (an artifact that fails to run is a failed check)
                    rows.append(fail(row, needs, e))
    return rows
