"""Topologies: ``Swarm`` and ``Supervisor``, nested runners under one ``execution_id``.

Every level of a topology is a :class:`~actors._durable._engine.Level`; the root level runs in the
run's actor, and each working level below it (a worker, the active swarm member) in a child actor
(``_child``), each driven by the same :class:`LevelMachine`, all writing through the run's one log. The messages between a level and its child are
in ``_protocol``.
"""

from typing import TypeAlias

from .._agent import Agent
from ._child import ChildLevel, LevelMachine
from ._supervisor import Supervisor
from ._swarm import Swarm

__all__ = ["ChildLevel", "LevelMachine", "Runner", "Supervisor", "Swarm"]

Runner: TypeAlias = Agent | Swarm | Supervisor
"""What a durable run runs: ``ActorSystem(runners=...)`` and ``spawn`` take these."""
