"""Awaiting several writes at once without leaving any running behind an error."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def gather_all(*awaitables: Awaitable[T]) -> list[T]:
    """The results of ``awaitables``, run concurrently, in their order.

    Unlike ``asyncio.gather``, an error is raised only once every one has ended (the first error
    in their order): when a batch's caller sees it, none of the batch's writes is still running.
    """
    ended = await asyncio.gather(*awaitables, return_exceptions=True)
    results: list[T] = []
    for outcome in ended:
        if isinstance(outcome, BaseException):
            raise outcome
        results.append(outcome)
    return results
