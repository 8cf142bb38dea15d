"""The partitioned layout: ``jobs/``, ``waiting/`` and ``locks/`` split into K partitions.

::

    <root>                      data: {"jobboard_partitions": K} (recorded when the board is created)
    <root>/jobs/p<k>/<id>       k = the job's sequence mod K (so is every path below)
    <root>/jobs/p<k>/<id>/<dep> a link, as in the flat layout
    <root>/waiting/p<k>/<id>
    <root>/locks/p<k>/<id>
    <root>/members/<name>       ephemeral: a board that claims (see :mod:`.fleet`)

Everything else (trash, results, keys, marks, counters, entities) stays flat. A job's
partition follows from its id, so a job keeps it when it moves ``waiting -> jobs``, is
requeued, or is found by its key. The layout is chosen once, when the board's root is
created (``?partitions=K``), and recorded in the root's data: a board opened later
uses the recorded layout; asking for another one is a :class:`BoardConflict`.
"""

from __future__ import annotations

import asyncio
import json
import logging

from jobboard.errors import BoardConflict
from jobboard_zookeeper.layout import DIRECTORIES, Paths
from jobboard_zookeeper.ops import Create, SetData, ZkError
from jobboard_zookeeper.options import ZooKeeperOptions
from jobboard_zookeeper.zk import ZooKeeper

logger = logging.getLogger(__name__)

PARTITIONED = ("jobs", "waiting", "locks")
RECORD_KEY = "jobboard_partitions"


class PartitionedPaths(Paths):
    """Paths of a partitioned board: a job's nodes are under ``p<sequence mod K>``."""

    def __init__(self, root: str, partitions: int) -> None:
        super().__init__(root)
        self.partitions = partitions

    def partition_of(self, job_id: str) -> int:
        """The job's partition (-1 for a string that is no job id: its paths name no node)."""
        sequence = job_id.rpartition("-")[2]
        return int(sequence) % self.partitions if sequence.isdigit() else -1

    def part_dir(self, name: str, partition: int) -> str:
        return f"{self.root}/{name}/p{partition}"

    def node(self, name: str, job_id: str) -> str:
        if name not in PARTITIONED:
            return f"{self.root}/{name}/{job_id}"
        return f"{self.part_dir(name, self.partition_of(job_id))}/{job_id}"

    def listed_dirs(self, name: str) -> list[str]:
        if name not in PARTITIONED:
            return [self.dir(name)]
        return [self.part_dir(name, k) for k in range(self.partitions)]


def _recorded(data: bytes) -> int | None:
    """The partition count recorded in a root's data, or ``None`` (a flat board, or not ours)."""
    try:
        record = json.loads(data) if data[:1] == b"{" else None
    except ValueError:
        return None
    value = record.get(RECORD_KEY) if isinstance(record, dict) else None
    return value if isinstance(value, int) and value > 0 else None


async def _layout(zk: ZooKeeper, root: str, wanted: int | None) -> int:
    """The partition count of the board at ``root`` (0: flat), recording ``wanted`` on a new root."""
    record = json.dumps({RECORD_KEY: wanted}).encode() if wanted else b""
    while True:
        found = await zk.get(root)
        if found is None:
            parent = root.rsplit("/", 1)[0]
            if parent:
                await zk.ensure_path(parent)
            failure = (await zk.multi([Create(root, record)], retry_safe=True)).failure()
            if failure is None:
                return wanted or 0
            if failure[1] != "NodeExists":
                raise ZkError(failure[1], root)
            continue
        data, stat = found
        recorded = _recorded(data)
        if recorded is None and wanted and stat.num_children == 0:  # an empty root: not a board yet
            if (await zk.multi([SetData(root, record, stat.version)], retry_safe=True)).ok:
                return wanted
            continue
        return recorded or 0


async def open_layout(zk: ZooKeeper, options: ZooKeeperOptions) -> Paths:
    """Read (or record, for a new board) the board's layout and make sure its directories exist.

    :raises BoardConflict: the URL asks for a layout other than the one the board has.
    """
    root = Paths(options.root).root
    found = await _layout(zk, root, options.partitions)
    if options.partitions is not None and options.partitions != found:
        have = f"partitions={found}" if found else "the flat layout (no partitions)"
        raise BoardConflict(f"the board at {root} was created with {have}, not partitions={options.partitions}; "
                            "a board's layout is fixed when it is created: drop the option or use a new root")
    paths: Paths = PartitionedPaths(root, found) if found else Paths(root)
    for name in DIRECTORIES:
        await zk.ensure_path(paths.dir(name))
    if found:
        await zk.ensure_path(paths.dir("members"))
        await _ensure_partitions(zk, paths)
    return paths


async def _ensure_partitions(zk: ZooKeeper, paths: Paths) -> None:
    """Create the partition directories that are missing (three listings when none is)."""
    listed = await asyncio.gather(*(zk.children(paths.dir(name)) for name in PARTITIONED))
    there = {f"{paths.dir(name)}/{child}" for name, found in zip(PARTITIONED, listed, strict=True)
             for child in (found[0] if found else [])}
    missing = [path for name in PARTITIONED for path in paths.listed_dirs(name) if path not in there]
    await asyncio.gather(*(zk.create_missing(path) for path in missing))


async def list_dir(zk: ZooKeeper, paths: Paths, name: str) -> list[str]:
    """The children of a directory; of all its partitions, pipelined, on a partitioned board."""
    dirs = paths.listed_dirs(name)
    if len(dirs) == 1:
        children = await zk.children(dirs[0])
        return children[0] if children else []
    listed = await asyncio.gather(*map(zk.children, dirs))
    return [child for found in listed if found for child in found[0]]
