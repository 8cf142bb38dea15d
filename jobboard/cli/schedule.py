"""``jobboard schedule add|list|remove``: the periodic jobs stored on a board (see :mod:`jobboard.schedules.scheduler`)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time

from jobboard.board.contract import JobBoard
from jobboard.cli.command import CommandError, UsageError, job_name, positive_seconds, seconds
from jobboard.cli.jobs import _priority, parse_details
from jobboard.cli.options import shared_options
from jobboard.cli.output import format_table, print_json
from jobboard.errors import InvalidJob
from jobboard.job import Priority
from jobboard.schedules.schedule import CATCH_UP, Schedule, cron_times
from jobboard.schedules.scheduler import REFRESH, add_schedule, list_schedules, remove_schedule

SCHEDULE_ACTIONS = {
    "add": "store a schedule on the board (replacing one with its name)",
    "list": "list the schedules stored on the board",
    "remove": "remove a schedule from the board",
}


SCHEDULE_EXAMPLES = {
    "add": "jobboard schedule add nightly-report report --cron '0 3 * * *' --catch-up once\n"
           "  jobboard schedule add beat ping --every 30 --details '{\"source\": \"beat\"}'",
    "list": "jobboard schedule list --json",
    "remove": "jobboard schedule remove beat",
}


def schedule_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "examples:\n  " + "\n  ".join(example.split("\n")[0] for example in SCHEDULE_EXAMPLES.values())
    actions = parser.add_subparsers(title="actions", dest="action", metavar="ACTION", required=True)
    subs = {action: actions.add_parser(action, help=text, description=text, parents=[shared_options()],
                                       epilog=f"examples:\n  {SCHEDULE_EXAMPLES[action]}",
                                       formatter_class=argparse.RawDescriptionHelpFormatter)
            for action, text in SCHEDULE_ACTIONS.items()}
    add = subs["add"]
    add.add_argument("name", help="the schedule's name (letters, digits, _.:-)")
    add.add_argument("job", type=job_name, help="the name of the job posted each period (a handler name)")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--every", type=positive_seconds, metavar="SECONDS", help="post every SECONDS (from the epoch)")
    when.add_argument("--cron", type=cron_expression, metavar="EXPR", help="post at the times of a cron expression, UTC "
                      "(needs jobboard[cron])")
    add.add_argument("--details", default=None, metavar="JSON", help="the job's details, a JSON object "
                     "(@PATH: from a file, -: from stdin)")
    add.add_argument("--priority", type=_priority, default=Priority.NORMAL, help="the job's priority")
    add.add_argument("--catch-up", choices=CATCH_UP, default="skip",
                     help="periods missed while no scheduler ran: skip them (default) or run once")
    add.add_argument("--grace", type=seconds, default=None, metavar="SECONDS",
                     help="with skip: how late a period may still be posted (default half a period, <= 60)")
    subs["list"].add_argument("--json", action="store_true", help="print JSON instead of a table")
    subs["remove"].add_argument("name", help="the schedule to remove")


def cron_expression(text: str) -> str:
    """An argparse type: a valid cron expression (a bad one is a usage error, exit status 2).
    Without croniter the text is kept: adding the schedule then says what to install (exit status 1)."""
    if importlib.util.find_spec("croniter") is not None:
        try:
            cron_times(text, time.time())
        except InvalidJob as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return text


async def schedule_command(board: JobBoard, args: argparse.Namespace) -> int:
    if args.action == "add":
        details = parse_details(args.details)
        try:
            schedule = Schedule(args.name, args.job, every=args.every, cron=args.cron, details=details,
                                priority=args.priority, catch_up=args.catch_up, grace=args.grace)
        except InvalidJob as error:  # a bad name or option: a usage error (exit 2)
            raise UsageError(str(error)) from None
        await add_schedule(board, schedule)
        print(f"schedule {schedule.name}: {schedule.job} {schedule.describe()}")
        print(f"(running schedulers read the schedules every {REFRESH:g} s: its first post comes within that, "
              "once a worker runs with --schedule)", file=sys.stderr)
        return 0
    if args.action == "remove":
        if not await remove_schedule(board, args.name):
            raise CommandError(f"no schedule {args.name!r} on the board")
        print(f"removed schedule {args.name}")
        return 0
    schedules = await list_schedules(board)
    if args.json:
        print_json([schedule.to_record() for schedule in schedules])
    else:
        rows = [[s.name, s.job, s.describe(), s.catch_up, s.priority.name.lower()] for s in schedules]
        print(format_table(["name", "job", "when", "catch_up", "priority"], rows))
    return 0
