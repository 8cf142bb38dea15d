"""Run the mutants: ``python -m tests.mutation.run [--only NAME] [--check] [--full] [--jobs N]``.

The tree (git's tracked and untracked-but-not-ignored files, as they are in the work tree,
never ``.venv``; or, with ``--rev``, a commit) is copied to a temporary directory; the copy must
type-check and pass the suite unmutated. Then each mutant gets its own copy of that copy, must
type-check there (``mypy --strict``: a mutant fails the suite by the behaviour it changes, not
by a name or argument it got wrong), and the suite runs there with the copy's
packages first on ``PYTHONPATH`` (the venv's editable install points at the checkout), under
a pytest plugin that records where every ``jobboard*`` module came from: a run that imported
anything from outside its copy is an error, not a result. The sanity mutant must be killed.
Exit status: 0 every mutant killed, 1 some survived, 2 the run itself is not valid.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from tests.mutation.mutants import MUTANTS
from tests.mutation.mutating import Mutant, apply, problems
from tests.mutation.provenance import ENVIRONMENT
from tests.mutation.spread_mutants import SPREAD_MUTANTS, SPREAD_SUITE

REPO = Path(__file__).resolve().parents[2]
SUITE = ["tests/backends/memory/test_conformance.py"]
PACKAGE_DIRS = [".", "backends/memory", "backends/zookeeper", "backends/redis"]
CLUSTER = "JOBBOARD_TEST_REDIS_CLUSTER"


@dataclass(frozen=True)
class Target:
    """What a run breaks and checks: its mutants (the sanity mutant first), the suite, and what that needs."""

    mutants: list[Mutant]
    suite: list[str]
    env: dict[str, str] = field(default_factory=dict)
    """Set for every suite run."""
    needs: str = ""
    """An environment variable the suite needs (a running server's address)."""


TARGETS = {
    "memory": Target(MUTANTS, SUITE),
    "spread": Target(SPREAD_MUTANTS, SPREAD_SUITE, {"JOBBOARD_SPREAD_EXACT": "1"}, CLUSTER),
}
"""``memory``: memory:// and the board's front; ``spread``: a redis:// board spread over a Redis Cluster, run
under ``python -m tests.support.rediscluster run -- ...`` (which sets ``JOBBOARD_TEST_REDIS_CLUSTER``)."""
PLUGIN = "jobboard_mutation_provenance"
"""The name ``provenance.py`` is copied under, beside the copies (a copy of a commit may not have it)."""


@dataclass
class Result:
    """One run of the suite on one copy."""

    mutant: str
    status: str
    """killed, survived, timeout (killed, but by no named case) or error (the run is not a result)."""
    seconds: float
    failed: list[str] = field(default_factory=list)
    """``test_name: first line of its failure``, in the order they ran."""
    passed: int = 0
    detail: str = ""


def copy_tree(source: Path, target: Path, rev: str | None = None) -> int:
    """Copy the checkout's files (not ``.venv``, nothing git ignores), or commit ``rev``'s, to ``target``."""
    if rev:
        archive = subprocess.run(["git", "archive", rev], cwd=source, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(target, filter="data")
            return sum(member.isfile() for member in tar.getmembers())
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=source, capture_output=True, check=True).stdout.decode()
    copied = 0
    for name in listing.split("\0"):
        if not name or name.startswith(".venv/") or not (source / name).is_file():
            continue  # (a tracked file deleted in the work tree is not copied)
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, target / name)
        copied += 1
    return copied


def suite_command(root: Path, options: argparse.Namespace) -> list[str]:
    return [options.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", PLUGIN,
            f"--junitxml={root / '.mutation-junit.xml'}", *([] if options.full else ["-x"]), *options.tests]


def type_errors(root: Path, path: str, options: argparse.Namespace) -> str:
    """What ``mypy --strict`` says of ``path`` in the copy at ``root`` ('' when it type-checks)."""
    cache = str(root / ".mutation-mypy-cache")
    command = [options.python, "-m", "mypy", "--strict", "--cache-dir", cache, path]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
    return "" if done.returncode == 0 else done.stdout.strip()


def run_suite(root: Path, mutant: Mutant | None, options: argparse.Namespace) -> Result:
    """Run the suite in the copy at ``root`` and classify the run."""
    name = mutant.name if mutant else "(unmutated)"
    path = [*(str(root / each) for each in PACKAGE_DIRS), str(root.parent / "plugins")]
    env = {**os.environ, **options.target.env, "PYTHONPATH": os.pathsep.join(path),
           ENVIRONMENT: str(root / ".mutation-provenance.json"), "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    try:
        done = subprocess.run(suite_command(root, options), cwd=root, env=env, capture_output=True, text=True,
                              timeout=options.timeout, check=False)
    except subprocess.TimeoutExpired:
        return Result(name, "timeout", time.monotonic() - started, detail=f"no result in {options.timeout}s")
    seconds = time.monotonic() - started
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
    foreign = foreign_modules(root, mutant or options.target.mutants[0])
    if foreign:
        return Result(name, "error", seconds, detail=f"code from outside the copy ran: {foreign}\n{tail}")
    passed, failed = read_junit(root / ".mutation-junit.xml")
    if failed:
        return Result(name, "killed", seconds, failed, passed)
    if done.returncode == 0 and passed:
        return Result(name, "survived", seconds, passed=passed)
    return Result(name, "error", seconds, passed=passed, detail=f"pytest exit {done.returncode}:\n{tail}")


def foreign_modules(root: Path, mutant: Mutant) -> str:
    """What shows the run did not use the copy's code ('' when it did; ``mutant``: the file it changes, the
    sanity mutant's for the unmutated run, must have been imported from the copy)."""
    origin = root / ".mutation-provenance.json"
    if not origin.is_file():
        return "no provenance recorded (pytest did not finish its session)"
    files: dict[str, str] = json.loads(origin.read_text(encoding="utf-8"))
    outside = sorted(f"{module} from {file}" for module, file in files.items()
                     if file != "None" and not Path(file).resolve().is_relative_to(root.resolve()))
    changed = str((root / mutant.path).resolve())
    if changed not in {str(Path(file).resolve()) for file in files.values() if file != "None"}:
        outside.append(f"{changed} was never imported")
    return "; ".join(outside)


def read_junit(report: Path) -> tuple[int, list[str]]:
    """How many cases passed, and the failed (or errored) ones with their first message line."""
    if not report.is_file():
        return 0, []
    passed, failed = 0, []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        problem = next((child for child in case if child.tag in {"failure", "error"}), None)
        if problem is None:
            passed += case.find("skipped") is None
            continue
        message = (problem.get("message") or problem.tag).strip().splitlines() or [problem.tag]
        failed.append(f"{case.get('name')}: {message[0][:150]}")
    return passed, failed


def run_mutant(base: Path, scratch: Path, mutant: Mutant, options: argparse.Namespace) -> Result:
    root = scratch / mutant.name
    shutil.copytree(base, root)
    try:
        apply(root, mutant)
        complaints = type_errors(root, mutant.path, options)
        if complaints:
            result = Result(mutant.name, "error", 0.0, detail=f"does not type-check:\n{complaints}")
        else:
            result = run_suite(root, mutant, options)
    finally:
        if not options.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"  {result.status:8} {result.seconds:5.1f}s  {mutant.name}", file=sys.stderr, flush=True)
    return result


def chosen_mutants(only: list[str] | None, catalogue: list[Mutant]) -> list[Mutant]:
    """The mutants of ``catalogue`` asked for (all by default), always with its sanity mutant (its first) first."""
    if not only:
        return catalogue
    known = {mutant.name: mutant for mutant in catalogue}
    unknown = [name for name in only if name not in known]
    if unknown:
        raise SystemExit(f"no mutant named {', '.join(unknown)} (see --list)")
    sanity = catalogue[0]
    return [sanity, *(known[name] for name in only if name != sanity.name)]


def git(*arguments: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *arguments], capture_output=True, text=True, check=True)
    return done.stdout


def summary(baseline: Result, mutants: list[Mutant], results: list[Result], options: argparse.Namespace,
            started: float) -> dict[str, Any]:
    changed = git("status", "--porcelain").splitlines()
    counts = {status: sum(result.status == status for result in results)
              for status in ("killed", "timeout", "survived", "error")}
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "commit": options.commit,
        "rev": options.rev,
        "work_tree_changes": None if options.rev else len(changed), "suite": options.tests,
        "exit_first": not options.full,
        "seconds": round(time.monotonic() - started, 1), "baseline": asdict(baseline), "counts": counts,
        "mutants": [{"file": mutant.path, "guarantee": mutant.guarantee, **asdict(result)}
                    for mutant, result in zip(mutants, results, strict=True)],
    }


def table(mutants: list[Mutant], results: list[Result]) -> str:
    width = max(len(mutant.name) for mutant in mutants)
    lines = [f"{'mutant':{width}}  {'status':8}  {'secs':>5}  cases  first failing case", "-" * (width + 67)]
    for mutant, result in zip(mutants, results, strict=True):
        first = result.failed[0].split(":")[0] if result.failed else (result.detail.splitlines() or [""])[0]
        row = f"{result.status:8}  {result.seconds:5.1f}  {len(result.failed):5}  {first}"
        lines.append(f"{mutant.name:{width}}  {row}")
    lines += [f"SURVIVED {m.name}: {m.guarantee} ({m.path})"
              for m, r in zip(mutants, results, strict=True) if r.status == "survived"]
    return "\n".join(lines)


def verdict(results: list[Result]) -> int:
    sanity = results[0]
    if sanity.status != "killed" or any(result.status == "error" for result in results):
        print("the run is not valid: the sanity mutant must be killed and no run may error", file=sys.stderr)
        return 2
    return 1 if any(result.status == "survived" for result in results) else 0


def check_unmutated(base: Path, options: argparse.Namespace) -> Result | None:
    """The unmutated copy's run, if it type-checks and passes (else say why and return ``None``)."""
    complaints = type_errors(base, options.target.mutants[0].path.rsplit("/", 1)[0], options)
    if complaints:
        print("the unmutated copy does not type-check, so no mutant can be:", complaints, sep="\n")
        return None
    baseline = run_suite(base, None, options)
    print(f"  unmutated: {baseline.status}, {baseline.passed} passed in {baseline.seconds:.1f}s",
          file=sys.stderr)
    if baseline.status != "survived":
        print("the unmutated copy does not pass the suite, so no mutant can be judged:",
              *baseline.failed, baseline.detail, sep="\n  ")
        return None
    return baseline


def run(options: argparse.Namespace) -> int:
    started, mutants = time.monotonic(), chosen_mutants(options.only, options.target.mutants)
    options.commit = git("rev-parse", "--short", options.rev or "HEAD").strip()
    options.rev = options.rev and options.commit  # (HEAD may move while the run runs)
    scratch = Path(tempfile.mkdtemp(prefix="jobboard-mutation-"))
    try:
        base = scratch / "base"
        (scratch / "plugins").mkdir()
        shutil.copy(Path(__file__).with_name("provenance.py"), scratch / "plugins" / f"{PLUGIN}.py")
        print(f"copied {copy_tree(REPO, base, options.rev)} files ({options.rev or 'work tree'}) to {base}",
              file=sys.stderr)
        found = problems(base, mutants)
        if found:
            print("mutants that would not apply exactly once (update their anchors):", *found, sep="\n  ")
            return 2
        if options.check:
            print(f"all {len(mutants)} anchors apply exactly once")
            return 0
        baseline = check_unmutated(base, options)
        if baseline is None:
            return 2
        with ThreadPoolExecutor(options.jobs) as pool:
            results = list(pool.map(lambda mutant: run_mutant(base, scratch, mutant, options), mutants))
        report = summary(baseline, mutants, results, options, started)
        if options.json:
            Path(options.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(json.dumps(report, indent=2))
        print(table(mutants, results))
        return verdict(results)
    finally:
        if options.keep:
            print(f"kept the copies in {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/mutate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=sorted(TARGETS), default="memory",
                        help="memory (default): memory:// and the board's front; spread: a redis:// board spread "
                             f"over a Redis Cluster (needs {CLUSTER}: run under tests.support.rediscluster run)")
    parser.add_argument("--only", action="append", metavar="NAME", help="run this mutant (repeatable)")
    parser.add_argument("--rev", help="copy this commit instead of the work tree (e.g. HEAD)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--check", action="store_true", help="only check every anchor applies exactly once")
    parser.add_argument("--full", action="store_true", help="no -x: list every case that kills each mutant")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--tests", action="append", help="test files to run (default: the target's conformance suite)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per suite run (default 600)")
    parser.add_argument("--json", help="also write the JSON summary to this file")
    parser.add_argument("--keep", action="store_true", help="keep the mutated copies")
    parser.add_argument("--python", default=sys.executable, help="the interpreter (default: this one)")
    options = parser.parse_args(argv)
    options.target = TARGETS[options.target]
    if options.target.needs and not os.environ.get(options.target.needs) and not (options.list or options.check):
        parser.error(f"{options.target.needs} is not set: run it under `python -m tests.support.rediscluster run -- ...`")
    options.tests = options.tests or options.target.suite
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    if options.list:
        print("\n".join(f"{m.name:42} {m.path.rsplit('/', 1)[-1]:9} {m.guarantee}" for m in options.target.mutants))
        return 0
    return run(options)


if __name__ == "__main__":
    sys.exit(main())
