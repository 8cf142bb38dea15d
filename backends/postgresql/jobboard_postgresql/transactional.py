"""Posting and consuming inside the application's own transaction (``post(..., connection=conn)``).

The board's function runs on the caller's connection, in whatever transaction it has open: after its
ROLLBACK there is no job (or the consume never happened, the claim still held), after its COMMIT there
is, and the NOTIFY the function sent to an idle session is delivered at that commit (PostgreSQL sends
notifications on commit only). Accepted connections: asyncpg's ``Connection``, psycopg 3's
``AsyncConnection`` (and its blocking ``Connection``, which blocks the event loop for the call), and
SQLAlchemy's ``AsyncConnection`` over either (its driver connection is used). Nothing is retried on the
caller's connection: a failure is the caller's transaction's, raised as ``BackendUnavailable``
(transient) or ``BoardConflict`` (permanent); anything else is ``Unsupported``.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Iterator
from typing import Any

import asyncpg

from jobboard.errors import BackendUnavailable, JobBoardError, Unsupported
from jobboard_postgresql.database import permanent, transient

PLACEHOLDER = re.compile(r"\$\d+")


async def driver_of(connection: Any) -> Any:
    """The driver connection behind ``connection``: SQLAlchemy's ``AsyncConnection`` unwrapped, after one
    statement through it (SQLAlchemy begins the driver's transaction at its first statement: over asyncpg,
    a board's call made first would otherwise commit on its own, outside the caller's transaction)."""
    raw = getattr(connection, "get_raw_connection", None)
    if raw is not None and inspect.iscoroutinefunction(raw):
        await connection.exec_driver_sql("SELECT 1")
        return (await raw()).driver_connection
    return connection


async def fetch_on(connection: Any, what: str, query: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
    """Run ``query`` (``$n`` placeholders, each used once and in order, with casts) on the caller's connection.

    :raises Unsupported: not a connection this backend can write in.
    """
    driver = await driver_of(connection)
    with caller_errors(what):
        if isinstance(driver, asyncpg.Connection):
            return [dict(row) for row in await driver.fetch(query, *args)]
        module = type(driver).__module__
        if module.startswith("psycopg.") or module == "psycopg":
            return await _psycopg(driver, PLACEHOLDER.sub("%s", query), args)
    raise Unsupported(f"postgresql:// writes in an asyncpg or psycopg 3 connection (or SQLAlchemy's over them), "
                      f"not a {type(driver).__module__}.{type(driver).__name__}")


@contextlib.contextmanager
def caller_errors(what: str) -> Iterator[None]:
    """A failure on the caller's connection as the contract's error: ``BackendUnavailable`` when transient (or
    the driver's connection error), ``BoardConflict`` or the like when permanent; the board's own errors pass."""
    try:
        yield
    except JobBoardError:
        raise
    except Exception as error:
        if transient(error) or type(error).__name__ in ("OperationalError", "InterfaceError"):
            raise BackendUnavailable(f"postgresql: {what} in the caller's transaction: {error}") from error
        raise permanent(error, f"{what} in the caller's transaction") from error


async def _psycopg(driver: Any, query: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
    cursor = driver.execute(query, args)
    if inspect.isawaitable(cursor):
        cursor = await cursor
        rows = await cursor.fetchall()
    else:
        rows = cursor.fetchall()
    names = [column.name for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in rows]
