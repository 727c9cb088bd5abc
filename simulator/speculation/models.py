"""An acceptance model built from its configuration, and the positional table a tree is shaped for."""
from __future__ import annotations

from ..config.mirror import (BurstyAcceptance, IIDAcceptance, NgramContextAcceptance, PositionalAcceptance,
                             TraceAcceptance)
from .acceptance import AcceptanceModel, TraceModel


def build_acceptance(config, base_dir: str = ".", scenario_file: str = "<scenario>",
                     typical_seen: float = 0.0) -> AcceptanceModel:
    if isinstance(config, IIDAcceptance):
        return AcceptanceModel([config.alpha], 1.0, repeat_last=True)
    if isinstance(config, PositionalAcceptance):
        return AcceptanceModel(list(config.probs), config.sibling_decay, config.repeat_last)
    if isinstance(config, BurstyAcceptance):
        from .regimes import BurstyModel
        return BurstyModel(config, typical_seen)
    if isinstance(config, NgramContextAcceptance):
        from .regimes import NgramContextModel
        return NgramContextModel(config, typical_seen)
    if isinstance(config, TraceAcceptance):
        from .trace_file import read_trace
        return TraceModel(read_trace(config, base_dir, scenario_file))
    raise TypeError(f"unknown acceptance model {config!r}")


def typical_table(model: AcceptanceModel, depth: int):
    """The table a tree is shaped for: the model's own, or for regime models their mixture at the typical history."""
    from .regimes import RegimeModel  # the regime models and trace files are imported where a scenario uses them

    if isinstance(model, RegimeModel):
        return model.typical_table(depth)
    return model.table(depth)
