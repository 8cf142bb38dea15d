"""The worker, in the order a job meets it: claim (:mod:`.conductor`, :mod:`.idle`), run (:mod:`.running`,
:mod:`.handlers`, :mod:`.progress`), settle (:mod:`.running`, :mod:`.retry`); its configuration and signals.

Names are imported on first use (``import jobboard.worker`` stays cheap, and optional extras load only when used)."""

from __future__ import annotations

from jobboard._exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from jobboard.worker.conductor import Worker
    from jobboard.worker.config import WorkerConfig, default_owner
    from jobboard.worker.early_signals import catch_early_signals
    from jobboard.worker.handlers import Handler, Handlers, Hook, JobContext, Middleware
    from jobboard.worker.retry import Fail, Retry, RetryPolicy
    from jobboard.worker.stats import WorkerStats

__all__ = ["Fail", "Handler", "Handlers", "Hook", "JobContext", "Middleware", "Retry", "RetryPolicy", "Worker", "WorkerConfig", "WorkerStats", "catch_early_signals", "default_owner"]

__getattr__ = lazy_exports(__name__, {"Fail": "retry", "Handler": "handlers", "Handlers": "handlers", "Hook": "handlers", "JobContext": "handlers", "Middleware": "handlers", "Retry": "retry", "RetryPolicy": "retry", "Worker": "conductor", "WorkerConfig": "config", "WorkerStats": "stats", "catch_early_signals": "early_signals", "default_owner": "config"})
