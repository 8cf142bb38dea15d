"""Why a claim did not win, and the error each reason becomes; why a settle failed (no I/O here)."""

from __future__ import annotations

from jobboard.errors import BackendUnavailable, JobBoardError, JobNotFound, NotClaimable
from jobboard_zookeeper.layout import Paths
from jobboard_zookeeper.ops import Create, Op, TxnResult


def why_not(result: TxnResult | None) -> str:
    """``lost`` (reply lost, claim not held), ``claimed``, ``gone`` or ``changed``."""
    failure = result.failure() if result else None
    if failure is None:
        return "lost"
    op, error = failure
    if isinstance(op, Create) and error == "NodeExists":
        return "claimed"
    return "gone" if error == "NoNode" else "changed"


def claim_refused(job_id: str, outcome: str) -> JobBoardError:
    """The error for a claim that did not win (the job is not locked by anyone now)."""
    if outcome == "delayed":
        return NotClaimable(f"job {job_id} is delayed by retry_after")
    if outcome in ("claimed", "changed"):
        return NotClaimable(f"job {job_id} changed while it was being claimed; try again")
    if outcome == "lost":
        return BackendUnavailable(f"the reply to the claim of job {job_id} was lost and the claim does "
                                  "not hold; try again")
    return JobNotFound(f"job {job_id} is not claimable: {outcome}")


def not_found(job_id: str) -> JobNotFound:
    return JobNotFound(f"job {job_id} is not on the board")


def lost_claim(failure: tuple[Op, str], paths: Paths, job_id: str) -> bool:
    """Whether a failed settle failed on the claim itself (not on a dependent)."""
    op, error = failure
    if op.path == paths.lock(job_id):
        return True
    return op.path == paths.job(job_id) and error in ("BadVersion", "NoNode")
