"""The mutation run's anchor rules (tests/mutation): a mutant applies exactly once or is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mutation.mutants import MUTANTS, SANITY
from tests.mutation.mutating import AnchorError, Mutant, apply, mutated, problems
from tests.mutation.run import TARGETS
from tests.mutation.spread_mutants import SPREAD_SANITY

SOURCE = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x * 2\n"


def mutant(old: str, new: str = "pass", name: str = "m") -> Mutant:
    return Mutant(name, "a guarantee", "module.py", old, new)


def test_an_anchor_found_once_is_replaced() -> None:
    assert mutated(SOURCE, mutant("return x + 1", "return x + 2")) == SOURCE.replace("x + 1", "x + 2")


def test_a_missing_anchor_is_refused() -> None:
    with pytest.raises(AnchorError, match="not found"):
        mutated(SOURCE, mutant("return x - 1"))


def test_an_ambiguous_anchor_is_refused() -> None:
    with pytest.raises(AnchorError, match="found 2 times"):
        mutated(SOURCE, mutant("return x"))


def test_a_replacement_that_changes_nothing_is_refused() -> None:
    with pytest.raises(AnchorError, match="equals the anchor"):
        mutated(SOURCE, mutant("return x + 1", "return x + 1"))


def test_apply_refuses_a_mutant_that_does_not_compile_and_leaves_the_file(tmp_path: Path) -> None:
    (tmp_path / "module.py").write_text(SOURCE)
    with pytest.raises(SyntaxError):
        apply(tmp_path, mutant("return x + 1", "return x +"))
    assert (tmp_path / "module.py").read_text() == SOURCE


def test_problems_names_every_bad_mutant_and_duplicate_names(tmp_path: Path) -> None:
    (tmp_path / "module.py").write_text(SOURCE)
    good, twice = mutant("x + 1", "x + 2", "good"), mutant("x * 2", name="good")
    missing = mutant("x - 1", name="gone")
    found = problems(tmp_path, [good, missing, twice, Mutant("lost", "g", "nowhere.py", "a", "b")])
    assert found == ["good: two mutants have this name", f"gone: anchor not found in module.py: {'x - 1'!r}",
                     "lost: no file nowhere.py"]


def test_the_catalogue_has_unique_names_and_the_sanity_mutant_first() -> None:
    names = [each.name for each in MUTANTS]
    assert len(set(names)) == len(names) and MUTANTS[0] is SANITY


def test_every_target_starts_with_its_sanity_mutant_and_applies_to_the_checkout() -> None:
    """Each target's catalogue (``--target``): unique names, its sanity mutant first, every anchor exactly once in
    this tree (the spread board's too: ``bash scripts/mutate --target spread --check`` without a cluster)."""
    assert TARGETS["memory"].mutants[0] is SANITY and TARGETS["spread"].mutants[0] is SPREAD_SANITY
    for target in TARGETS.values():
        assert problems(Path(__file__).resolve().parents[2], target.mutants) == []
