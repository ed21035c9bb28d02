"""``python -m mohd --scale paper --out DIR [--seed N]``: the paper-scale comparison on CUDA.

Stamped and written as ``DIR/mohd/result_full.json`` (with ``log``-style output on stdout), like ``icml25 reproduce
mohd --full``; ``--scale cpu`` runs the CPU-sized ``--full`` the same way. Without a CUDA device ``--scale paper``
refuses to start (exit status 2) and says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from icml25_shared.report import MissingPrerequisite
from mohd.reproduce import require_cuda

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, run the reproduction in this process on one torch thread, print the verdicts.

    Args:
        argv: the command-line arguments (``sys.argv[1:]`` when ``None``).

    Returns:
        0 when the run finished, 1 when it crashed.
    """
    from icml25_shared.runner import run_in_process

    ap = argparse.ArgumentParser(prog="python -m mohd", description="MoHD's reproduction at CPU or paper scale.")
    ap.add_argument("--scale", choices=("cpu", "paper"), default="paper")
    ap.add_argument("--out", type=Path, default=Path("icml25-results"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--download", action="store_true")
    args = ap.parse_args(argv)
    if args.scale == "paper":
        try:
            require_cuda()
        except MissingPrerequisite as err:
            ap.exit(2, f"mohd: --scale paper refused: {err}\n")
    target = "mohd.reproduce:reproduce_paper" if args.scale == "paper" else "mohd.reproduce:reproduce"
    res = run_in_process("mohd", target, args.out / "mohd", full=True, download=args.download, seed=args.seed)
    for c in res.claims:
        print(f"{c.verdict:<14} {c.label}: {c.measured}")
    print(f"{res.counts}; {args.out / 'mohd' / 'result_full.json'}")
    return 1 if res.crashed else 0


if __name__ == "__main__":
    raise SystemExit(main())
