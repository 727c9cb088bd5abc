"""Run a sweep of a scenario over config paths, its points in parallel, rows streamed to a resumable CSV; a rerun
skips the points that already have an ok row.
"""
from __future__ import annotations

import logging
import sys

from ..config.errors import ConfigError
from . import limit_options

log = logging.getLogger("specsim")

EXAMPLES = """
  specsim sweep sweep_link                         a shipped sweep by name -> ./sweep_link.results.csv
  specsim sweep my_sweep.yaml --workers 4 --out results.csv
  specsim sweep my_sweep.yaml --dask tcp://scheduler:8786
"""


def configure(p) -> None:
    p.add_argument("sweep", help="sweep YAML file, or the name of a shipped one")
    p.add_argument("--workers", type=int, metavar="N", help="local worker processes (default: the number of CPUs)")
    p.add_argument("--dask", metavar="tcp://HOST:PORT", help="run on this Dask scheduler instead of local processes")
    p.add_argument("--out", metavar="RESULTS.csv", help="results file (default: <sweep name>.results.csv in the "
                   "current directory)")
    p.add_argument("--fidelity", choices=("fast", "layer", "link", "event"), help="override every point's fidelity")
    p.add_argument("--chunk", type=int, metavar="N", help="points per task sent to a worker (default: automatic)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (shown only on a terminal anyway)")
    p.add_argument("--max-points", type=float, metavar="N", help="refuse sweeps of more than N points (default 100000)")
    p.add_argument("--point-timeout", type=float, metavar="S", help="kill a local worker whose point runs past S "
                   "seconds and retry the point once (default: 60 s plus 10x the point's estimated time)")
    p.add_argument("--no-worker-timeout", type=float, metavar="S", help="with --dask: stop the sweep (rows kept, "
                   "rerun to resume) once the cluster has had no live worker for S seconds (default 60)")
    from .compare import rank_option

    rank_option(p)
    p.add_argument("--top", type=int, default=10, metavar="N", help="with --rank-by (or the file's rank_by): how "
                   "many of the best points to print (default 10)")
    limit_options(p)


def main(args) -> int:
    from . import show_progress
    from ..config.catalog import locate

    from ..results.files import check_output_file
    from ..results.limits import check_workers

    check_workers(args.workers)
    check_output_file(args.out, "--out")
    if args.chunk is not None and args.chunk < 1:
        raise ConfigError("command line", "--chunk", f"{args.chunk} points per task", ">= 1")
    if args.workers is not None and args.dask is not None:
        raise ConfigError("command line", "--workers", "has no effect with --dask (the cluster has its workers)")
    from ..experiments.cluster import ClusterLost, check_address
    from ..experiments.ranking import check_rank_by
    from ..experiments.sweep import Terminated, check_positive, load_sweep, run_sweep

    for flag in ("max_points", "point_timeout", "no_worker_timeout"):
        check_positive(getattr(args, flag), "--" + flag.replace("_", "-"))
    if args.dask is not None:
        check_address(args.dask)

    if args.top < 1:
        raise ConfigError("command line", "--top", f"{args.top} points", ">= 1")
    sweep = load_sweep(locate(args.sweep, "scenario"))
    rank_by = args.rank_by or sweep.spec.rank_by
    if rank_by:
        check_rank_by(rank_by, sweep.spec.metrics, "command line", "--rank-by")
    try:
        report = run_sweep(sweep, workers=args.workers, dask_address=args.dask,
                           out=args.out, fidelity=args.fidelity,
                           progress=False if args.no_progress or not show_progress() else None,
                           chunk_size=args.chunk, max_points=args.max_points, max_work=args.max_work,
                           point_timeout_s=args.point_timeout, no_worker_s=args.no_worker_timeout)
    except ClusterLost as exc:  # finished rows are kept: a rerun resumes
        print(f"sweep: stopped: {exc}; finished rows are kept in the results file, rerun to resume", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the workers are stopped, finished rows are kept
        signal_name = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
        print(f"sweep: stopped by {signal_name}; finished rows are kept, rerun to resume", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    log.info("%s", report.line())
    if rank_by:
        from ..experiments.ranking import ranking_table
        from ..experiments.rows import read_results

        print(ranking_table(read_results(report.out), rank_by, list(sweep.spec.axes), args.top))
    return 0
