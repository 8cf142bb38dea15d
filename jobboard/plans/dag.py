"""Dependency plans, built and checked without any I/O.

A :class:`Plan` is a set of tasks. Each task names a *registered handler*
(never code: zk-plan stores code and evaluates it, we do not), carries its own
arguments, and runs after the tasks in ``after=``; its handler receives its
arguments followed by those tasks' results, in ``after=`` order::

    plan = Plan("report")
    a = plan.task("fetch", "https://a")
    b = plan.task("fetch", "https://b")
    plan.task("merge", after=[a, b])        # merge(result_of_a, result_of_b)

``jobboard.plans.posting.post_plan`` posts a plan as linked jobs.
"""

from __future__ import annotations

import graphlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobboard.board.checks import check_name
from jobboard.board.codec import encode_value
from jobboard.errors import InvalidJob
from jobboard.job import INTERNAL_PREFIX, JobState, Priority


class InvalidPlan(InvalidJob):
    """A plan has a cycle, an unknown or duplicate task, or arguments msgpack cannot carry."""


@dataclass(frozen=True, slots=True)
class TaskRef:
    """A handle on a task of a plan, for ``after=``."""

    plan: str
    name: str


@dataclass(frozen=True, slots=True)
class Task:
    """One step of a plan."""

    name: str
    handler: str
    args: tuple[Any, ...] = ()
    after: tuple[str, ...] = ()
    priority: Priority = Priority.NORMAL
    max_attempts: int | None = None


@dataclass
class Plan:
    """A named set of tasks; see the module docstring."""

    name: str
    tasks: dict[str, Task] = field(default_factory=dict)

    def task(
        self, handler: str, *args: Any, name: str | None = None, after: Sequence[TaskRef | str] = (),
        priority: Priority | int | str = Priority.NORMAL, max_attempts: int | None = None,
    ) -> TaskRef:
        """Add a task that runs ``handler(*args, *results of after)``.

        :param name: unique in the plan (default: ``<handler>-<n>``).
        :raises InvalidPlan: bad handler name, duplicate task name, a task of
            another plan in ``after``, arguments msgpack cannot encode.
        """
        try:
            check_name(handler)
        except InvalidJob as error:
            raise InvalidPlan(f"plan {self.name!r}: {error}") from None
        if handler.startswith(INTERNAL_PREFIX):
            raise InvalidPlan(f"plan {self.name!r}: handler names starting with {INTERNAL_PREFIX!r} are reserved")
        name = name or f"{handler}-{len(self.tasks) + 1}"
        if name in self.tasks:
            raise InvalidPlan(f"plan {self.name!r}: a task named {name!r} exists already")
        self._check_args(name, args)
        self.tasks[name] = Task(name, handler, tuple(args), self._dependencies(name, after),
                                Priority.parse(priority), max_attempts)
        return TaskRef(self.name, name)

    def _check_args(self, name: str, args: tuple[Any, ...]) -> None:
        try:
            encode_value(list(args), what=f"arguments of task {name!r}")
        except InvalidJob as error:
            raise InvalidPlan(f"plan {self.name!r}: {error}") from None

    def _dependencies(self, name: str, after: Sequence[TaskRef | str]) -> tuple[str, ...]:
        names = []
        for dependency in after:
            if isinstance(dependency, TaskRef):
                if dependency.plan != self.name:
                    raise InvalidPlan(f"task {name!r} of plan {self.name!r} is after a task of plan "
                                      f"{dependency.plan!r}")
                dependency = dependency.name
            names.append(dependency)
        if len(set(names)) != len(names):
            raise InvalidPlan(f"plan {self.name!r}: task {name!r} names a dependency twice")
        return tuple(names)

    def validate(self) -> None:
        """Check the whole plan: non-empty, every ``after`` known, no cycle.

        :raises InvalidPlan: naming the task (or the cycle) at fault.
        """
        if not self.tasks:
            raise InvalidPlan(f"plan {self.name!r} has no tasks")
        for task in self.tasks.values():
            unknown = [dep for dep in task.after if dep not in self.tasks]
            if unknown:
                raise InvalidPlan(f"plan {self.name!r}: task {task.name!r} is after unknown task(s) "
                                  f"{', '.join(map(repr, unknown))}")
        try:
            tuple(self._sorter().static_order())
        except graphlib.CycleError as error:
            raise InvalidPlan(f"plan {self.name!r} has a cycle: {' -> '.join(error.args[1])}") from None

    def _sorter(self) -> graphlib.TopologicalSorter[str]:
        return graphlib.TopologicalSorter({task.name: task.after for task in self.tasks.values()})

    def generations(self) -> Iterator[list[Task]]:
        """The tasks in dependency order, as batches whose dependencies come earlier."""
        self.validate()
        sorter = self._sorter()
        sorter.prepare()
        while sorter.is_active():
            ready = sorted(sorter.get_ready())
            yield [self.tasks[name] for name in ready]
            sorter.done(*ready)


STATE_COLOURS = {
    JobState.WAITING: "#d9d9d9", JobState.UNCLAIMED: "#9ecae1", JobState.CLAIMED: "#fdae6b",
    JobState.COMPLETE: "#a1d99b", JobState.TRASHED: "#fc9272",
}


def to_dot(tasks: Mapping[str, Task], states: Mapping[str, JobState] | None = None) -> str:
    """The plan as Graphviz DOT, one colour per state."""
    lines = ["digraph plan {", "  rankdir=LR;", '  node [shape=box, style="rounded,filled", fillcolor="white"];']
    for task in tasks.values():
        state = (states or {}).get(task.name)
        colour = f', fillcolor="{STATE_COLOURS[state]}"' if state else ""
        label = task.name if state is None else f"{task.name}\\n{state.value}"
        lines.append(f'  "{task.name}" [label="{label}"{colour}];')
    lines += [f'  "{dep}" -> "{task.name}";' for task in tasks.values() for dep in task.after]
    return "\n".join([*lines, "}"])


def to_mermaid(tasks: Mapping[str, Task], states: Mapping[str, JobState] | None = None) -> str:
    """The plan as a Mermaid flowchart, one class (colour) per state."""
    ids = {name: f"t{index}" for index, name in enumerate(tasks)}
    lines = ["flowchart LR"]
    for name, node in ids.items():
        state = (states or {}).get(name)
        suffix = f":::{state.value}" if state else ""
        lines.append(f'  {node}["{name}{"<br/>" + state.value if state else ""}"]{suffix}')
    lines += [f"  {ids[dep]} --> {ids[task.name]}" for task in tasks.values() for dep in task.after]
    lines += [f"  classDef {state.value} fill:{colour}" for state, colour in STATE_COLOURS.items()]
    return "\n".join(lines)
