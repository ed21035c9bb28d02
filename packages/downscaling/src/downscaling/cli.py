"""``downscale``: profile a saved model, or run a declarative plan of operators on it.

::

    downscale profile MODEL_DIR [--batch 4] [--seq-len 64] [--energy auto] [--region world]
    downscale run plan.yaml
    downscale report BASELINE_DIR [NAME=]CANDIDATE_DIR... [--data ids.pt] [--windows 8] [--seq-len 64]
                     [--served-tokens 0] [--format markdown|html|json] [--region world]

A plan (YAML) names a local ``save_pretrained`` folder, the operators in order, and where to save::

    model: ./tiny-llama
    calib: {windows: 16, seq_len: 64, seed: 0}      # random token windows; or a path to a 1-D .pt tensor of ids
    steps:
      - prune: {method: heads, sparsity: 0.5}
      - prune: {method: wanda, sparsity: 0.5}
      - quantize: {scheme: int8_dynamic, backend: torch.ao}
    out: ./tiny-llama-downscaled                      # pruned models only (quantized ones are profiled, not saved)

``profile`` and ``run`` print JSON (profiles before and after each step). ``report`` profiles the baseline and
every candidate (``save_pretrained`` folders; a candidate is named by its folder or by ``NAME=``), evaluates bits
per token on ``--windows`` validation windows of ``--seq-len`` tokens -- seeded windows of the 1-D id tensor in
``--data`` (``torch.save``; your held-out text), else seeded random ids (then only the cost columns mean
anything) -- and prints :func:`downscaling.report`'s table: quality, FLOPs/token, bytes, J/token, CO2e, the Pareto
front and uneven degradation.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from icml25_shared.device import torch_threads
from icml25_shared.validate import check_int

__all__ = ["main", "report_models", "run_plan"]


def _load(path: str) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).eval()


def _batch(model: Any, batch: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    vocab = int(getattr(model.config, "vocab_size", 2))
    return torch.randint(0, vocab, (batch, seq_len), generator=torch.Generator().manual_seed(seed))


def _profile_dict(model: Any, x: torch.Tensor, **kw: Any) -> dict[str, Any]:
    from downscaling.profiling import profile

    p = profile(model, x, n_runs=kw.pop("n_runs", 3), train_flops=False, **kw).to_dict()
    p["batch_shape"] = list(p["batch_shape"])
    return p


def run_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """Run a plan (the module docstring's YAML as a dict); returns the profiles and records."""
    from downscaling.config import PruneConfig
    from downscaling.prune import finalize, prune
    from downscaling.quantize import quantize

    if not isinstance(plan, dict) or "model" not in plan or not isinstance(plan.get("steps"), list):
        raise ValueError(f"plan must be a mapping with 'model' and a list of 'steps', got {plan!r}")
    model = _load(str(plan["model"]))
    c = plan.get("calib", {}) or {}
    if isinstance(c, str):
        calib = torch.load(c).reshape(1, -1)
    else:
        calib = _batch(model, int(c.get("windows", 16)), int(c.get("seq_len", 64)), int(c.get("seed", 0)))
    x = _batch(model, 4, calib.shape[1])
    out: dict[str, Any] = {"before": _profile_dict(model, x), "steps": []}
    quantized = False
    for i, step in enumerate(plan["steps"]):
        if not isinstance(step, dict) or len(step) != 1:
            raise ValueError(f"steps[{i}] must be a one-key mapping (prune or quantize), got {step!r}")
        ((op, args),) = step.items()
        args = dict(args or {})
        if op == "prune":
            model, record = prune(model, PruneConfig(**{**args, "calib": calib}))
            record = {k: v for k, v in record.items() if k != "block_scores"}
        elif op == "quantize":
            model, record = quantize(model, **args)
            quantized = True
        else:
            raise ValueError(f"steps[{i}] operator must be 'prune' or 'quantize', got {op!r}")
        out["steps"].append({"op": op, "args": args, "record": record, "profile": _profile_dict(model, x)})
    if plan.get("out") and not quantized:
        saved: Any = finalize(model)  # a transformers PreTrainedModel (nn.Module types save_pretrained loosely)
        saved.save_pretrained(plan["out"])
        out["saved"] = str(plan["out"])
    return out


def _val_windows(vocab: int, data: str | None, windows: int, seq_len: int, seed: int = 0) -> list[tuple[Any, Any]]:
    gen = torch.Generator().manual_seed(seed)
    if data is None:
        ids = torch.randint(0, vocab, (windows, seq_len + 1), generator=gen)
    else:
        stream = torch.load(data).reshape(-1).long()
        if stream.numel() <= seq_len + 1:
            raise ValueError(f"--data holds {stream.numel()} token ids, needs more than seq_len + 1 = {seq_len + 1}")
        starts = torch.randint(stream.numel() - seq_len - 1, (windows,), generator=gen).tolist()
        ids = torch.stack([stream[s : s + seq_len + 1] for s in starts])
    return [(ids[:, :-1], ids[:, 1:])]


def report_models(
    baseline: str,
    candidates: Sequence[str],
    *,
    data: str | None = None,
    windows: int = 8,
    seq_len: int = 64,
    served_tokens: float = 0.0,
    region: str | None = None,
) -> Any:
    """The ``report`` subcommand as a function: a :class:`downscaling.report.Report` of saved models."""
    from downscaling.report import bpc_evaluator, report

    windows = check_int("windows", windows, min=1)
    seq_len = check_int("seq_len", seq_len, min=1)
    if not candidates:
        raise ValueError("candidates must name at least one model folder, got none")
    base = _load(baseline)
    named = {}
    for c in candidates:
        name, _, path = c.rpartition("=") if "=" in c else (Path(c).name, "", c)
        if name in named or name == "baseline":
            raise ValueError(f"candidate names must be unique and not 'baseline', got {name!r} twice or reserved")
        named[name] = _load(path)
    val = _val_windows(int(base.config.vocab_size), data, windows, seq_len)
    return report(base, named, bpc_evaluator(val), served_tokens, batch=val[0][0], region=region)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="downscale", description=(__doc__ or "").split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("profile", help="profile a save_pretrained folder")
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--energy", default="auto", choices=("auto", "measure", "estimate"))
    p.add_argument("--region", default=None)
    p.add_argument("--pue", type=float, default=1.0)
    r = sub.add_parser("run", help="run a YAML plan")
    r.add_argument("plan", type=Path)
    rp = sub.add_parser("report", help="cost-accounted comparison of saved models (Pareto, degradation)")
    rp.add_argument("baseline")
    rp.add_argument("candidates", nargs="+", metavar="[NAME=]CANDIDATE")
    rp.add_argument("--data", default=None, help="a torch.save'd 1-D tensor of validation token ids")
    rp.add_argument("--windows", type=int, default=8)
    rp.add_argument("--seq-len", type=int, default=64)
    rp.add_argument("--served-tokens", type=float, default=0.0)
    rp.add_argument("--region", default=None)
    rp.add_argument("--format", default="markdown", choices=("markdown", "html", "json"))
    a = ap.parse_args(argv)
    with torch_threads(1):
        if a.cmd == "report":
            rep = report_models(a.baseline, a.candidates, data=a.data, windows=a.windows, seq_len=a.seq_len,
                                served_tokens=a.served_tokens, region=a.region)  # fmt: skip
            if a.format == "json":
                res = rep.frame.to_dict(orient="records")
            else:
                sys.stdout.write((rep.markdown() if a.format == "markdown" else rep.html()) + "\n")
                return 0
        elif a.cmd == "profile":
            m = _load(a.model)
            res = _profile_dict(m, _batch(m, a.batch, a.seq_len), energy=a.energy, region=a.region, pue=a.pue)
        else:
            import yaml

            res = run_plan(yaml.safe_load(a.plan.read_text()))
    json.dump(res, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
