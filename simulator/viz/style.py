"""What every figure shares: matplotlib loaded lazily with the Agg backend, atomic saving, category colours."""
from __future__ import annotations

import os
from collections.abc import Mapping

DPI = 100
CATEGORY_COLORS = {"compute": "#4c72b0", "memory": "#55a868", "launch": "#c44e52", "allreduce_transfer": "#8172b2",
                   "allreduce_wait": "#ccb974", "draft": "#64b5cd", "other": "#999999"}
CATEGORY_LABELS = {"compute": "compute", "memory": "memory", "launch": "launch (GPU waits for host)",
                   "allreduce_transfer": "all-reduce transfer", "allreduce_wait": "all-reduce wait",
                   "draft": "drafting", "other": "other (scheduler, sync)"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def metadata(svg: bool, provenance: Mapping | None = None) -> dict:
    """The file's metadata: which specsim made it and, for a figure of one run, that run's provenance (JSON)."""
    import json

    from ..config.version import __version__
    from ..results.sections import json_of

    out = {"Creator" if svg else "Software": f"specsim {__version__}"}
    if provenance:
        out["Description"] = json.dumps(json_of(provenance), sort_keys=True)
    return out


def _save(fig, path: str, provenance: Mapping | None = None) -> str:
    from ..results.files import atomic_write

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)  # API callers; the CLI checked it before
    svg = path.lower().endswith(".svg")
    try:
        with atomic_write(path, "wb") as handle:  # a failed write keeps the previous figure
            fig.savefig(handle, dpi=DPI, format="svg" if svg else "png", bbox_inches="tight",
                        metadata=metadata(svg, provenance))
    finally:
        _pyplot().close(fig)
    return path
