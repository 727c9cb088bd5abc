"""The event fidelity's processes: every rank a host and a GPU stream, every collective, the drafter; the serving
loop (engine.server.Server.run) is the scheduler process that drives them (docs/design.md, "The event model")."""
from __future__ import annotations

from .ranks import Collective, PassOrder, Rank, RankSet
from .steps import Drafter, EventStepCosts

__all__ = ["Collective", "Drafter", "EventStepCosts", "PassOrder", "Rank", "RankSet"]
