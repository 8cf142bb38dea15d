"""The example command lines at the end of each command's ``--help`` (docs/cli.md shows the same)."""

from __future__ import annotations

MAIN = """
jobboard --board zookeeper://127.0.0.1:2181/jobs post resize --details '{"image": "a.png"}'
JOBBOARD_URL=zookeeper://127.0.0.1:2181/jobs jobboard stats
jobboard COMMAND --help         (every command, option and exit status: docs/cli.md)
"""
POST = """
jobboard --board memory://demo post resize --details '{"image": "a.png"}' --priority high
jobboard post report --details @details.json --after job-0000000001 --max-attempts 3
echo '{"order": 42}' | jobboard post charge --details - --key order-42
jobboard post export --details '{"tenant": 42}' --group tenant-42
"""
LIST = """
jobboard --board zookeeper://127.0.0.1:2181/jobs list
jobboard list --unclaimed --json
"""
SHOW = """
jobboard show job-0000000001
jobboard show job-0000000001 --json
"""
RESULT = """
jobboard result job-0000000001
jobboard result job-0000000001 --json | jq .result
"""
WAIT = """
jobboard wait job-0000000001
jobboard wait job-0000000001 --timeout 30 --json
"""
TRASH = """
jobboard trash job-0000000001 --reason "bad input file"
jobboard trash job-0000000001 job-0000000002
"""
CANCEL = """
jobboard cancel job-0000000001
jobboard cancel job-0000000001 job-0000000002 --reason "customer withdrew the order"
"""
TRASHED = """
jobboard trashed
jobboard trashed --json
"""
STATS = """
jobboard stats
jobboard stats --json
"""
LIMIT = """
jobboard limit
jobboard limit tenant-42 --concurrency 2
jobboard limit payments --rate 20/s
jobboard limit account-7 --sequence
jobboard limit tenant-42 --clear
"""
PAUSE = """
jobboard pause export
jobboard pause
"""
RESUME = """
jobboard resume export
jobboard resume
"""
TOP = """
jobboard top
jobboard top --interval 2
jobboard top --once
"""
DEMO = """
jobboard demo
"""
DASHBOARD = """
jobboard dashboard zookeeper://127.0.0.1:2181/jobs --port 8080
jobboard dashboard memory://demo --demo
jobboard dashboard URL --allow-actions --token s3cret-token
"""
WORKER = """
jobboard worker zookeeper://127.0.0.1:2181/jobs --handlers app.jobs:handlers --concurrency 4
jobboard worker memory://demo --handlers app.jobs:handlers --burst --log-format json
"""
CHECK = """
jobboard check zookeeper://127.0.0.1:2181/jobs
jobboard check --board zookeeper://127.0.0.1:2181/jobs --name worker-1
jobboard check zookeeper://127.0.0.1:2181/jobs --json
"""
PLAN = """
jobboard plan list
jobboard plan status job-0000000042
jobboard plan wait job-0000000042
"""
PLAN_ACTIONS = {
    "list": "jobboard plan list\njobboard plan list --json",
    "status": "jobboard plan status job-0000000042\njobboard plan status job-0000000042 --json",
    "wait": "jobboard plan wait job-0000000042",
    "show": "jobboard plan show job-0000000042\njobboard plan show job-0000000042 --format dot | dot -Tsvg",
    "cancel": "jobboard plan cancel job-0000000042",
    "cleanup": "jobboard plan cleanup",
}
