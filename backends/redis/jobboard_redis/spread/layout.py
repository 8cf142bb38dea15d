"""Where a spread board's partitions live (``?cluster=1&partitions=K``; docs/backends/redis.md).

Partition k of board ``<root>`` has the key prefix ``jb:{<root>#jbp<k>/<K>/<salt k>}:``: its own hash slot, so
its own master. The salts are chosen when the board is first opened, from ``CLUSTER SLOTS``, so that the
masters serve K/S partitions each (hashed tags alone leave one master with up to half of them), and recorded
in the board's control slot (``jb:{<root>}:layout``, written once with ``SET NX``): every board reads the
same layout. A board asking for another K raises :class:`~jobboard.errors.BoardConflict`. A resharding moves
whole partitions (each is one slot): it may unbalance them, never split them.

Each board also takes a home partition there (``INCR jb:{<root>}:homes``, modulo K): its plain posts go there
(``order=exact``: to each partition in turn, from the next one), and its claims look there first, so the boards
of a fleet spread their work evenly over the partitions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from jobboard.errors import BoardConflict, JobBoardError
from jobboard_redis.client import RedisClient
from jobboard_redis.cluster import key_slot
from jobboard_redis.options import RedisOptions
from jobboard_redis.records import text

__all__ = ["Layout", "choose_salts", "open_layout", "partition_of", "partition_root"]

MAX_SALT = 100_000


def _crc16_table() -> tuple[int, ...]:
    """CRC-16/XMODEM of every byte value (:func:`jobboard_redis.cluster.crc16`, one byte at a time)."""
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC16 = _crc16_table()


def partition_of(name: str, count: int) -> int:
    """The partition (of ``count``) of a group or key ``name``: its CRC-16/XMODEM (Redis Cluster's, as
    :func:`jobboard_redis.cluster.crc16`) mod ``count``; by table, on every keyed or grouped post (~1 us for a
    short name, against 20 for the bit loop)."""
    crc = 0
    for byte in name.encode():
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[(crc >> 8) ^ byte]
    return crc % count


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    """A spread board's partitions (their roots, in order) and this board's home partition."""

    roots: tuple[str, ...]
    home: int


def partition_root(root: str, k: int, count: int, salt: int) -> str:
    """The board root of partition ``k`` of ``count`` (its hash tag; ``board.lua`` reads k and K from it)."""
    return f"{root}#jbp{k}/{count}/{salt}"


def choose_salts(root: str, count: int, masters: Sequence[tuple[int, int, str]]) -> list[int]:
    """Salts putting partition k on master k mod S of ``masters`` ((first slot, last slot, master) ranges),
    the masters taken in a fixed order (their names sorted).

    :raises JobBoardError: no salt below ``MAX_SALT`` reaches a master (a master serving almost no slot).
    """
    names = sorted({master for _, _, master in masters})
    salts = []
    for k in range(count):
        wanted = names[k % len(names)]
        for salt in range(MAX_SALT):
            slot = key_slot(partition_root(root, k, count, salt))
            if any(first <= slot <= last and master == wanted for first, last, master in masters):
                salts.append(salt)
                break
        else:
            raise JobBoardError(f"no hash tag of partition {k} of {root!r} falls on Redis Cluster master {wanted}")
    return salts


def _masters(slots: Any) -> list[tuple[int, int, str]]:
    """(first slot, last slot, ``host:port`` of its master) of a ``CLUSTER SLOTS`` reply."""
    return [(int(entry[0]), int(entry[1]), f"{text(entry[2][0])}:{int(entry[2][1])}") for entry in slots]


def layout_numbers(root: str, record: str) -> list[int]:
    """A layout record's numbers: K, then K salts. :raises BoardConflict: not a record a board writes."""
    parts = record.split()
    numbers = [int(part) for part in parts if part.isascii() and part.isdigit()]
    if not numbers or len(numbers) != len(parts) or len(numbers) != numbers[0] + 1:
        raise BoardConflict(f"board {root!r}: its layout record is not valid: {record!r}")
    return numbers


async def open_layout(options: RedisOptions) -> Layout:
    """The board's layout (chosen and recorded if it has none yet) and a home partition for this board.

    Atomicity: the layout is written once (``SET NX``); the homes counter is one ``INCR``.
    :raises BoardConflict: the board was created with another number of partitions.
    :raises BackendUnavailable: the control slot's master could not be reached.
    """
    control = RedisClient(dataclasses.replace(options, partitions=1))
    try:
        salts = choose_salts(options.root, options.partitions, _masters(await control.command("CLUSTER", "SLOTS")))
        record = " ".join(str(number) for number in (options.partitions, *salts))
        stored = await control.command("SET", options.prefix + "layout", record, "NX", "GET")
        count, *salts = layout_numbers(options.root, text(stored or record))
        if count != options.partitions:
            raise BoardConflict(f"board {options.root!r} is spread over {count} partitions, not "
                                f"{options.partitions} (partitions={count} in the URL opens it)")
        home = (int(await control.command("INCR", options.prefix + "homes")) - 1) % count
    finally:
        await control.close()
    return Layout(tuple(partition_root(options.root, k, count, salt) for k, salt in enumerate(salts)), home)
