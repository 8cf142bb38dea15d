"""A mutant: one exact textual replacement in one file, refused unless its anchor occurs exactly once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class AnchorError(Exception):
    """A mutant's anchor text is missing or ambiguous in its file (the code moved: update the mutant)."""


@dataclass(frozen=True)
class Mutant:
    name: str
    guarantee: str
    """The guarantee the mutant breaks, in the contract's words."""
    path: str
    """The file to change, relative to the tree's root."""
    old: str
    """The anchor: text that must occur exactly once in ``path``."""
    new: str


def mutated(text: str, mutant: Mutant) -> str:
    """``text`` with the mutant's anchor replaced. :raises AnchorError: anchor missing or ambiguous."""
    if mutant.old == mutant.new:
        raise AnchorError(f"{mutant.name}: the replacement equals the anchor (nothing would change)")
    count = text.count(mutant.old)
    if count != 1:
        where = "not found" if count == 0 else f"found {count} times"
        raise AnchorError(f"{mutant.name}: anchor {where} in {mutant.path}: {mutant.old!r}")
    return text.replace(mutant.old, mutant.new)


def check_anchor(root: Path, mutant: Mutant) -> None:
    """:raises AnchorError: the mutant would not apply exactly once under ``root``."""
    file = root / mutant.path
    if not file.is_file():
        raise AnchorError(f"{mutant.name}: no file {mutant.path}")
    mutated(file.read_text(encoding="utf-8"), mutant)


def apply(root: Path, mutant: Mutant) -> None:
    """Apply the mutant to the tree at ``root`` (a copy: never the checkout).

    :raises AnchorError: anchor missing or ambiguous.
    :raises SyntaxError: the mutated file does not compile (the mutant itself is wrong).
    """
    file = root / mutant.path
    text = mutated(file.read_text(encoding="utf-8"), mutant)
    compile(text, str(file), "exec")
    file.write_text(text, encoding="utf-8")


def problems(root: Path, mutants: list[Mutant]) -> list[str]:
    """Every anchor problem of ``mutants`` under ``root``, and duplicate names."""
    found: list[str] = []
    names = [mutant.name for mutant in mutants]
    twice = sorted({name for name in names if names.count(name) > 1})
    found += [f"{name}: two mutants have this name" for name in twice]
    for mutant in mutants:
        try:
            check_anchor(root, mutant)
        except AnchorError as error:
            found.append(str(error))
    return found
