"""The neighbour search's product: ``addmm`` with broadcast norms against the norms inside it.

The exact search's values are ``||z_r||^2 - 2 <z_q, z_r>`` for a block of queries
against every reference (``skdml/metrics/_exact.py``). ``torch.addmm`` broadcasts
the norms into the output, then accumulates the product into it; the frame now
forms one product of ``[-2 z_q, 1]`` and ``[z_r, ||z_r||^2]`` (``d + 1`` terms).
This times both, and a plain product for reference, on one thread, for a block of
76 queries (the CPU block of MAP@R at 55,000 x 16) against 55,000 references, in
float32 and float64, d = 16 and 128: the best of 30 calls each.

Usage::

    python benchmarks/studies/bench_search_product.py    # results/search_product.{md,json}
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from _common import markdown_table, save  # noqa: E402

ROWS, N_REF = 76, 55_000


def _best_ms(fn, reps=30):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


def main():
    # no options, but --help must print the usage, not rerun the study over its results
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    torch.set_num_threads(1)
    rows, data = [], []
    with threadpool_limits(1):
        for dtype in (torch.float32, torch.float64):
            for d in (16, 128):
                gen = torch.Generator().manual_seed(0)
                R = torch.randn(N_REF, d, dtype=dtype, generator=gen)
                Q = R[:ROWS].clone()
                sq = (R * R).sum(1)
                out = torch.empty(ROWS, N_REF, dtype=dtype)
                q_factor = torch.cat([-2 * Q, torch.ones(ROWS, 1, dtype=dtype)], 1)
                r_factor = torch.cat([R, sq[:, None]], 1).T.contiguous()
                t_addmm = _best_ms(lambda: torch.addmm(sq.unsqueeze(0), Q, R.T, beta=1.0,
                                                       alpha=-2.0, out=out))
                t_inside = _best_ms(lambda: torch.mm(q_factor, r_factor, out=out))
                t_plain = _best_ms(lambda: torch.mm(Q, R.T, out=out))
                name = str(dtype).replace("torch.", "")
                rows.append([name, d, f"{t_addmm:.2f}", f"{t_inside:.2f}", f"{t_plain:.2f}",
                             f"{t_inside / t_addmm:.2f}"])
                data.append({"dtype": name, "d": d, "addmm_ms": t_addmm,
                             "norms_inside_ms": t_inside, "plain_mm_ms": t_plain})
    table = markdown_table(["dtype", "d", "addmm, broadcast norms (ms)",
                            "norms inside the product (ms)", "plain product, no norms (ms)",
                            "inside / addmm"], rows)
    markdown = (f"# The search's product for a block of {ROWS} queries x {N_REF:,} references, "
                "one thread\n\nBest of 30 calls each.\n\n" + table + "\n")
    save("search_product", markdown, {"rows": ROWS, "n_ref": N_REF, "runs": data})
    return 0


if __name__ == "__main__":
    sys.exit(main())
