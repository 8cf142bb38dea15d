"""Dependency plans: built and checked without I/O (:mod:`.dag`), posted as linked jobs and followed (:mod:`.posting`).

Names are imported on first use (``import jobboard.plans`` stays cheap, and optional extras load only when used)."""

from __future__ import annotations

from jobboard._exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from jobboard.plans.dag import InvalidPlan, Plan, Task, TaskRef, to_dot, to_mermaid
    from jobboard.plans.posting import (
        PlanHandle,
        PlanOutcome,
        PlanProgress,
        PlanStatus,
        cleanup_interrupted_plans,
        post_plan,
    )

__all__ = ["InvalidPlan", "Plan", "PlanHandle", "PlanOutcome", "PlanProgress", "PlanStatus", "Task", "TaskRef", "cleanup_interrupted_plans", "post_plan", "to_dot", "to_mermaid"]

__getattr__ = lazy_exports(__name__, {"InvalidPlan": "dag", "Plan": "dag", "PlanHandle": "posting", "PlanOutcome": "posting", "PlanProgress": "posting", "PlanStatus": "posting", "Task": "dag", "TaskRef": "dag", "cleanup_interrupted_plans": "posting", "post_plan": "posting", "to_dot": "dag", "to_mermaid": "dag"})
