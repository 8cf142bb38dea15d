"""Flow control from the command line: ``jobboard limit`` (list, set, clear), ``jobboard pause`` and ``resume``.

Each is one call to the board (:meth:`~jobboard.board.contract.JobBoard.set_limit` and its kin); a
backend without flow control says so in one line (exit 1).
"""

from __future__ import annotations

import argparse

from jobboard.board.contract import JobBoard
from jobboard.board.limits import GroupLimit, Paused, Rate, limit_spec, parse_rate
from jobboard.cli.command import EXIT_NOT_MET, EXIT_OK, UsageError, group_text, whole_number
from jobboard.cli.output import format_table, print_json
from jobboard.errors import InvalidJob, Unsupported


def rate_text(text: str) -> Rate:
    """An argparse type: ``20/s``, ``100/m``, ``5/h``, ``3/2.5s``."""
    try:
        return parse_rate(text, "rate")  # argparse names the option: "argument --rate: rate must look like ..."
    except InvalidJob as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def limit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("group", nargs="?", default=None, type=group_text,
                        help="the group to set, clear or show (none: list every limit)")
    parser.add_argument("--concurrency", type=whole_number, default=None, metavar="N",
                        help="at most N jobs of the group running at once, fleet-wide (0 holds the group)")
    parser.add_argument("--sequence", action="store_true",
                        help="one job of the group at a time, in posting order")
    parser.add_argument("--rate", type=rate_text, default=None, metavar="COUNT/PERIOD",
                        help="at most COUNT claims in any PERIOD: 20/s, 100/m, 5/h, 3/2.5s")
    parser.add_argument("--clear", action="store_true", help="remove the group's limit")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def limits_table(limits: list[GroupLimit]) -> str:
    """The limits as a table (``no limits`` when there are none)."""
    if not limits:
        return "no limits"
    rows = [(each.group, "-" if each.concurrency is None else str(each.concurrency), "yes" if each.sequence else "-",
             "-" if each.rate is None else str(each.rate), str(each.running), str(each.waiting))
            for each in limits]
    return format_table(("group", "concurrency", "sequence", "rate", "running", "waiting"), rows)


async def limit(board: JobBoard, args: argparse.Namespace) -> int:
    """List the limits, or set, clear or show one group's."""
    setting = args.concurrency is not None or args.sequence or args.rate is not None
    if args.group is None:
        if setting or args.clear:
            raise UsageError("name the GROUP to set or clear a limit of")
        return _show(await board.limits(), args.json)
    if args.clear:
        if setting:
            raise UsageError("--clear takes no --concurrency, --sequence or --rate")
        found = await board.clear_limit(args.group)
        print(f"{args.group}: limit cleared" if found else f"{args.group}: had no limit")
        return EXIT_OK
    if setting:
        try:
            limit_spec(args.group, args.concurrency, args.sequence, args.rate)  # contradicting options: exit 2
        except InvalidJob as error:
            raise UsageError(str(error)) from None
        await board.set_limit(args.group, concurrency=args.concurrency, sequence=args.sequence, rate=args.rate)
    mine = [each for each in await board.limits() if each.group == args.group]
    if not mine:
        print(f"{args.group}: no limit")
        return EXIT_NOT_MET
    return _show(mine, args.json)


def _show(limits: list[GroupLimit], as_json: bool) -> int:
    if as_json:
        print_json([each.to_json() for each in limits])
    else:
        print(limits_table(limits))
    return EXIT_OK


def pause_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", default=None, help="the job name (none: the whole board)")


def paused_text(paused: Paused) -> str:
    """``the whole board, export, resize`` or ``nothing``."""
    parts = (["the whole board"] if paused.board else []) + sorted(paused.names)
    return ", ".join(parts) or "nothing"


async def pause(board: JobBoard, args: argparse.Namespace) -> int:
    """Stop new claims of NAME (or of every job) on every board; running jobs finish."""
    await board.pause(args.name)
    print(f"paused: {paused_text(await board.paused())}")
    return EXIT_OK


async def resume(board: JobBoard, args: argparse.Namespace) -> int:
    """Lift the pause of NAME (or the whole board's)."""
    await board.resume(args.name)
    print(f"paused: {paused_text(await board.paused())}")
    return EXIT_OK


async def flow_lines(board: JobBoard) -> list[str] | None:
    """What is paused and the limits table, as lines (``jobboard stats`` and ``top``); ``None`` on a backend
    without flow control."""
    try:
        limits, paused = await board.limits(), await board.paused()
    except Unsupported:
        return None
    return [f"paused: {paused_text(paused)}", *limits_table(limits).splitlines()]
