"""Each package's ``__init__`` is its public face: an explicit, sorted ``__all__`` whose names exist."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = ["stores", "actors", "actors.models", "replication"]

CONTRACT = {
    "actors": [
        "ActorSystem",
        "Actor",
        "ActorRef",
        "Agent",
        "tool",
        "interrupt",
        "Resume",
        "idempotent",
        "current_run",
        "RunRef",
        "RunResult",
        "MailboxFull",
        "AskTimeout",
        "ActorCrashed",
        "ActorStopped",
        "TetherError",
        "AlreadyResumed",
        "CheckpointError",
        "RunNotFound",
        "RunExists",
        "WriteConflict",
        "SerializationError",
        "IdempotencyError",
        "RunnerNotFound",
        "ToolNotFound",
        "ResumeRequired",
        "MaxTurnsExceeded",
    ],
    "actors.models": ["FunctionModel", "ModelReply", "ToolCall", "Message", "OpenAIChat"],
    "stores": ["SQLiteStore", "PostgresStore", "Checkpoint", "PendingInterrupt"],
}


def _isort_key(name: str) -> tuple[int, str]:
    """ruff's ``__all__`` order: CONSTANTS, then Classes, then functions, each alphabetical."""
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return kind, name


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_explicit_sorted_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert isinstance(exported, list)
    assert exported == sorted(exported, key=_isort_key), f"{name}.__all__ is not sorted"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    for public in exported:
        assert hasattr(module, public), f"{name}.__all__ names {public!r}, which does not exist"
    for public in [n for n in vars(module) if not n.startswith("_")]:
        obj = getattr(module, public)
        if getattr(obj, "__module__", "").startswith(name.split(".")[0]) and not isinstance(
            obj, type(module)
        ):
            assert public in exported, f"{name}.{public} is public but not in __all__"


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_contract_names_are_exported(name: str) -> None:
    module = importlib.import_module(name)
    missing = [n for n in CONTRACT[name] if n not in module.__all__]
    assert not missing, f"{name} lacks contract names {missing}"


def test_store_errors_are_the_same_objects_in_actors() -> None:
    import actors
    import stores

    for error in [
        "TetherError",
        "AlreadyResumed",
        "CheckpointError",
        "RunNotFound",
        "RunExists",
        "WriteConflict",
        "SerializationError",
        "IdempotencyError",
    ]:
        assert getattr(actors, error) is getattr(stores, error)
    assert issubclass(stores.RunNotFound, stores.CheckpointError)
    assert issubclass(stores.RunExists, stores.CheckpointError)
    assert issubclass(stores.WriteConflict, stores.AlreadyResumed)
    assert issubclass(stores.IdempotencyError, stores.SerializationError)
    for error in [
        "MailboxFull",
        "AskTimeout",
        "ActorCrashed",
        "ActorStopped",
        "RunnerNotFound",
        "ToolNotFound",
        "ResumeRequired",
        "MaxTurnsExceeded",
    ]:
        assert issubclass(getattr(actors, error), stores.TetherError)
