"""A check of the checks: break one guarantee of ``memory://`` at a time and see the conformance suite fail.

``bash scripts/mutate`` (``python -m tests.mutation.run``) copies the tree, applies one mutant
(``mutants.py``) per copy and runs ``tests/backends/memory/test_conformance.py`` there; see docs/testing.md.
Not part of the pytest suite (``tests/testing/test_mutation_anchors.py`` checks only the anchor rules).
"""
