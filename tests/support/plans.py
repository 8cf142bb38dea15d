"""zk-plan's stress plan, shared by the DAG tests and benchmarks."""

from __future__ import annotations

import random

from jobboard.plans.dag import Plan


def stress_plan(tasks: int = 100, roots: int = 10, fan_in: int = 10, seed: int = 7) -> Plan:
    """The first ``roots`` tasks have no dependencies; each later task depends on
    ``fan_in`` tasks chosen at random among the earlier ones. Task ``i`` is called
    as ``check(i, expected, *results)``: ``expected`` lists its dependencies' numbers."""
    chooser = random.Random(seed)
    plan = Plan(f"stress-{tasks}")
    for number in range(tasks):
        deps = [] if number < roots else chooser.sample(range(number), min(fan_in, number))
        plan.task("check", number, deps, name=f"t{number}", after=[f"t{dep}" for dep in deps])
    return plan


def wide_and_deep_plan(layers: int = 40, width: int = 50, fan_in: int = 3, seed: int = 11) -> Plan:
    """``layers`` x ``width`` tasks; each task after the first layer depends on
    ``fan_in`` random tasks of the layer before."""
    chooser = random.Random(seed)
    plan = Plan(f"wide-{layers}x{width}")
    for layer in range(layers):
        for column in range(width):
            deps = [] if layer == 0 else [f"l{layer - 1}-{c}" for c in chooser.sample(range(width), fan_in)]
            plan.task("step", layer, name=f"l{layer}-{column}", after=deps)
    return plan
