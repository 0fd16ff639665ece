"""Command line: ``python -m harness conform …``, ``bench …``, ``chaos …``, ``cluster …`` and ``docs``."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from harness.run_options import RUN_OPTIONS, RunOption
from harness.system.paths import check_writable

#: The exit statuses of every subcommand: pytest's, since ``conform`` is pytest
#: underneath and CI already reads pytest's (checked against pytest.ExitCode in
#: tests/unit/test_cli_errors.py). Bad input never reads as a negative verdict:
#: a CI gate on ``bench --compare`` or ``report diff`` must not take a typo for a regression.
EXIT_OK = 0
EXIT_NEGATIVE = 1  # a negative verdict: tests failed, not conformant, B slower, a cell got worse, a violation
EXIT_INTERRUPTED = 2
EXIT_INTERNAL_ERROR = 3
EXIT_USAGE = 4  # bad input, refused before anything runs
EXIT_NOTHING_RUN = 5

PROG = "python -m harness"


def exit_statuses(negative: str | None, own: str = "") -> str:
    """The epilog paragraph every ``--help`` ends with: the one convention, with
    what a negative verdict (1) is for this subcommand (None: it has none)."""
    lines = [
        "exit status (pytest's, for every subcommand):",
        f"  {EXIT_OK}  success",
        f"  {EXIT_NEGATIVE}  " + (negative or "(not used by this command)"),
        f"  {EXIT_INTERRUPTED}  interrupted (Ctrl-C, SIGTERM)",
        f"  {EXIT_INTERNAL_ERROR}  internal error (a traceback: please report it)",
        f"  {EXIT_USAGE}  usage error: bad input, refused before anything runs",
        f"  {EXIT_NOTHING_RUN}  nothing was run",
    ]
    return "\n".join(([own, ""] if own else []) + lines)


class _Parser(argparse.ArgumentParser):
    """argparse with the usage error's exit status of this convention (argparse's own is 2,
    which here means interrupted), and epilogs kept as written (they are tables)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        #: Makes the epilog when help is asked for: conform's imports the plugin,
        #: which no other use of the command line should wait for.
        self.epilog_factory: Any = None

    def format_help(self) -> str:
        if self.epilog_factory is not None:
            self.epilog = self.epilog_factory()
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _usage_error(command: str, message: str) -> int:
    """A usage error found after parsing, in the parser's own words: one line naming the value."""
    print(f"{PROG} {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _version() -> str:
    from harness import __version__
    from harness.backends import DISTRIBUTION
    from harness.contract import SPEC_VERSION

    return f"harness {__version__} ({DISTRIBUTION}), spec {SPEC_VERSION}"


def _conform(args: argparse.Namespace, pytest_args: list[str]) -> int:
    """Run the portable suite in a fresh pytest, whatever the current folder holds."""
    import os

    import harness.conformance as suite

    submission = None
    if args.submission:
        submission = _start_submission(args)
        if submission is None:
            return EXIT_USAGE
        pytest_args = [*pytest_args, f"--junitxml={submission / 'junit.xml'}"]

    here = os.path.dirname(os.path.abspath(suite.__file__))
    # A fresh interpreter: this one has imported harness already, which pytest
    # would rather rewrite on import (and the suite's own isolation forks it).
    # No configuration but ours: -c names an empty one (the current folder's
    # addopts or filterwarnings are for its own tests, not the suite), and the
    # suite's folder is the root and the one path given, so no conftest outside
    # it is loaded.
    argv = [sys.executable, "-m", "pytest", *_pytest_fixed_args(here), "--harness-backend", args.backend]
    if args.sample:
        from harness.conformance.sample import sample_expression

        args.k = sample_expression(args.k)
    for attr, flag in _PASSED_ON.items():
        value = getattr(args, attr)
        if value:
            argv += [flag, str(value)]
    argv += [flag for attr, flag in _FLAGS_PASSED_ON.items() if getattr(args, attr)]
    if not args.full and not args.sample and not args.submission:
        argv.append("--harness-sample-others")
    # A world size left out is the plugin's to find: HARNESS_WORLD_SIZE, else its
    # default, 1,2,4 (no ini is read: -c names an empty one). Passed on here, a bad
    # HARNESS_WORLD_SIZE was named as coming from the command line.
    extra = [a for a in pytest_args if a != "--"]
    if not any(a in ("-q", "--quiet", "-v", "--verbose") or a.startswith(("-q", "-v")) for a in extra):
        # Each test named as it starts: a long run shows where it is (and the
        # plugin names a test still running every 30 s).
        argv.append("-v")
    log = str(submission / "e2e.log") if submission is not None else None
    status = _in_a_temporary_folder_of_its_own(argv + extra, keep="--harness-keep-leftovers" in extra, log=log)
    if submission is not None:
        _finish_submission(args, submission, status)
    return status


#: conform's options that go to pytest as the plugin's, by the argparse dest
#: (--backend is given first, and flags alone).
_PASSED_ON = {
    row.conform_dest: row.option for row in RUN_OPTIONS if row.conform and not row.flag and row.name != "backend"
}
_PASSED_ON["k"] = "-k"
_FLAGS_PASSED_ON = {row.conform_dest: row.option for row in RUN_OPTIONS if row.conform and row.flag}


def _add_run_option(parser: argparse.ArgumentParser, row: RunOption) -> None:
    """conform's --NAME for the plugin's --harness-NAME: the same help (harness/run_options.py)."""
    if row.flag:
        parser.add_argument(row.short_form, action="store_true", help=row.help)
    else:
        parser.add_argument(row.short_form, required=row.name == "backend", help=row.help)


def _pytest_fixed_args(here: str) -> list[str]:
    """What every conform run gives pytest, before its own options (``here``: the suite's folder).

    No configuration but ours: -c names an empty one (the current folder's
    addopts or filterwarnings are for its own tests, not the suite), and the
    suite's folder is the root and the one path given, so no conftest outside
    it is loaded."""
    return [
        here,
        "-c",
        os.devnull,
        "--rootdir",
        here,
        "--confcutdir",
        here,
        "-p",
        "no:cacheprovider",
        # Hypothesis's pytest plugin, where installed, imports Hypothesis whole at
        # the end of every run (about 1 s of CPU); the suite uses none of it.
        "-p",
        "no:hypothesispytest",
    ]


def _conform_epilog() -> str:
    """conform's --help epilog, made from the lists the code uses (not copies of them)."""
    import textwrap

    from harness.backends import BUILTIN_BACKENDS, ENTRY_POINT_GROUP
    from harness.pytest_plugin.options import environment, option_names

    def wrapped(text: str, indent: str = "  ") -> list[str]:
        return textwrap.wrap(text, 100, initial_indent=indent, subsequent_indent=indent + "  ")

    lines = ["built-in backends (--backend; also 'module:attr', or an entry point of " + ENTRY_POINT_GROUP + "):"]
    for name, (factory, hint) in BUILTIN_BACKENDS.items():
        # An install hint's first part: the rest is for a CPU machine (README.md).
        lines += wrapped(f"{name:<10} {factory}" + (f" (needs {hint.split(' (')[0]})" if hint else ""))
    lines += ["", "environment variables read (an option given on the command line wins):"]
    for env, what in environment().items():
        lines += wrapped(f"{env}: {what}")
    lines += [
        "",
        "how the run is made: a fresh pytest in a temporary folder of its own (TMPDIR), as",
        "  python -m pytest " + " ".join(_pytest_fixed_args("<suite>")).replace(os.devnull, "/dev/null"),
        "  with --harness-backend BACKEND, then:",
    ]
    passed = {
        f"--{attr.replace('_', '-')}" if len(attr) > 1 else f"-{attr}": flag
        for attr, flag in (_PASSED_ON | _FLAGS_PASSED_ON).items()
    }
    lines += [f"  {option:<16} -> {flag}" for option, flag in passed.items()]
    lines += [
        "  -k with --sample: the sample's expression and -k's; neither --full, --sample nor --submission:",
        "  --harness-sample-others; -v unless -q or -v is given; --submission: --junitxml=DIR/junit.xml",
        "",
    ]
    given = {*passed.values(), "--harness-backend", "--harness-sample-others"}
    lines += wrapped(
        "Any other argument goes to pytest as it is (-x, --junitxml=F, -q, ...), the plugin's other options "
        "too: " + ", ".join(o for o in option_names() if o not in given) + ".",
        "",
    )
    return exit_statuses("a test failed (a FAIL in the matrix)", "\n".join(lines))


def _start_submission(args: argparse.Namespace) -> Any:
    """The submission's folder, made, with the reports pointed into it; None (and
    why, printed) where it cannot be one: it must be new or empty, for one backend."""
    from pathlib import Path

    from harness.report import submission as sub

    folder = Path(args.submission)
    where = f"python -m harness conform --submission {args.submission}"
    if "," in args.backend:
        print(f"{where}: a submission is for one backend, got --backend {args.backend!r}", file=sys.stderr)
        return None
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        print(f"{where}: {folder} exists and is not an empty folder (nothing is overwritten)", file=sys.stderr)
        return None
    folder.mkdir(parents=True, exist_ok=True)
    for attr, name in (("report_json", sub.REPORT_JSON), ("report_html", sub.REPORT_HTML)):
        if getattr(args, attr):
            print(f"{where}: --{attr.replace('_', '-')} is written into the submission as {name}", file=sys.stderr)
        setattr(args, attr, str(folder / name))
    args.test_logs = str(folder / sub.TEST_LOGS)
    return folder


def _finish_submission(args: argparse.Namespace, folder: Any, status: int) -> None:
    """submission.json and SHA256SUMS, once the run ended with ``status``."""
    import datetime
    import shlex

    from harness import __version__
    from harness.backends import BUILTIN_BACKENDS, load_backend
    from harness.report import machine_settings
    from harness.report import submission as sub

    loaded = load_backend(args.backend, where="--backend")
    factory = BUILTIN_BACKENDS[args.backend][0] if args.backend in BUILTIN_BACKENDS else args.backend
    manifest = {
        "backend": args.backend,
        "factory": factory,
        "backend_version": loaded.version or _distribution_version(factory) or __version__,
        "spec": machine_settings()["spec"],
        "harness": __version__,
        "world_sizes": list(loaded.world_sizes) if loaded.world_sizes else None,
        "start_methods": list(loaded.start_methods) if loaded.start_methods else None,
        "declared": dict(loaded.unsupported),
        "machine": machine_settings(),
        "command": shlex.join(["python", "-m", "harness", *sys.argv[1:]]),
        "exit_status": status,
        "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    sub.write_manifest(folder, manifest)
    sub.write_sums(folder)
    print(f"harness: submission written to {folder}; check it with: python -m harness verify {folder}")


def _distribution_version(factory: str) -> str | None:
    """The version of the installed distribution the factory's module comes from."""
    import importlib.metadata

    top = factory.split(":", 1)[0].split(".", 1)[0]
    for dist in importlib.metadata.packages_distributions().get(top, []):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _in_a_temporary_folder_of_its_own(argv: list[str], keep: bool, log: str | None = None) -> int:
    """Run the suite's pytest with ``TMPDIR`` a folder of the run's own, removed
    after it: what the run's own process puts in the temporary folder (pytest's
    base folder, a cache torch makes when a backend imports vLLM) goes with it,
    so a run leaves the machine's temporary folder as it found it. Each test's
    folder lies inside it. Kept with ``--harness-keep-leftovers``."""
    import shutil
    import tempfile

    from harness.system.environ import environ

    folder = tempfile.mkdtemp(prefix="harness-run-")
    try:
        with environ({"TMPDIR": folder}):
            return run_pytest(argv, log)
    finally:
        if keep:
            print(f"harness: the run's temporary folder is kept: {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)


def run_pytest(argv: list[str], log: str | None = None) -> int:
    """Run ``argv`` (a pytest) to its end, whatever signal this process gets.

    pytest runs in a process group of its own, so that a Ctrl-C at the
    terminal reaches it once, from here, rather than twice (a second
    KeyboardInterrupt would cut short the reports its first one writes).
    SIGINT, SIGTERM and SIGHUP to this process go to pytest as SIGINT: it stops
    at the running test, kills that test's processes, prints the partial matrix
    and writes its reports; this process waits for that and exits with its
    status, with no traceback of its own. Should this process be SIGKILLed,
    pytest gets SIGINT from the kernel (``PR_SET_PDEATHSIG``): no orphan.
    ``log``: a file that gets a copy of everything pytest prints."""
    import signal
    import subprocess

    received: list[int] = []

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGINT)

    out = subprocess.PIPE if log else None
    err = subprocess.STDOUT if log else None
    # Through a pipe pytest's output would come in blocks: unbuffered, the copy is as live as the terminal.
    env = {**os.environ, "PYTHONUNBUFFERED": "1"} if log else None
    child = subprocess.Popen(argv, preexec_fn=_own_group_dying_with_parent, stdout=out, stderr=err, env=env)  # noqa: PLW1509 - single-threaded here
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, forward) for s in handled}
    try:
        if log and child.stdout is not None:
            with open(log, "wb") as copy:
                for line in child.stdout:
                    sys.stdout.buffer.write(line)
                    sys.stdout.flush()
                    copy.write(line)
        return child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _own_group_dying_with_parent() -> None:
    """In the child, before exec: a process group of its own, and SIGINT when its parent dies."""
    import os
    import signal

    from harness.system.parent_death import signal_on_parent_death

    os.setpgid(0, 0)
    signal_on_parent_death(signal.SIGINT)


def _positive_int(text: str) -> int:
    """An argparse type: an int >= 1 (argparse names the option in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _world_sizes(text: str) -> list[int]:
    """An argparse type: comma-separated ints >= 1."""
    sizes = []
    for part in text.split(","):
        try:
            sizes.append(_positive_int(part.strip()))
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}") from None
    return sizes


def _check_bench_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fail on what the run would hit only after minutes: a backend that does
    not load, a world size it does not run, a JSON path that cannot be written."""
    from harness.backends import load_backend
    from harness.perf.runner import parse_side, split_sides

    for name in split_sides(args.backend):
        try:
            loaded = load_backend(parse_side(name, "--backend").spec)
        except (ImportError, ValueError, TypeError) as exc:
            parser.error(f"argument --backend: {exc}")
        if loaded.world_sizes is not None:
            for ws in args.world_size:
                if ws not in loaded.world_sizes:
                    parser.error(
                        f"argument --world-size: backend {name!r} runs world sizes "
                        f"{', '.join(map(str, loaded.world_sizes))}, got {ws}"
                    )
    check_writable(parser, "--json", args.json)


def _bench(args: argparse.Namespace) -> int:
    from harness.perf.bench import run
    from harness.perf.runner import split_sides

    iters = 500 if args.quick else args.iters
    idle_s = 2.0 if args.quick else 5.0
    figures = run(backends=split_sides(args.backend), world_sizes=args.world_size, iters=iters, idle_s=idle_s)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=2)
    return 0


def _docs(args: argparse.Namespace) -> int:
    """Where the shipped documents are; with a name, its text."""
    from harness.contract import SHIPPED_DOCS, doc_path

    if args.name:
        sys.stdout.write(doc_path(args.name).read_text(encoding="utf-8"))
        return 0
    for name in SHIPPED_DOCS:
        print(f"{name}: {doc_path(name)}")
    return 0


def _cluster(args: argparse.Namespace, command: list[str]) -> int:
    """Run ``command`` (default: a shell) as a driver of a simulated multi-node
    Ray cluster; the cluster goes when it ends, or when this process is stopped."""
    import os
    import signal

    from harness.system.nodes import unavailable_reason

    why = unavailable_reason()
    if why:
        print(f"python -m harness cluster: simulated nodes cannot be made here: {why}", file=sys.stderr)
        return EXIT_NOTHING_RUN
    from harness.executors.ray.simulated_cluster import SimulatedCluster

    command = command or [os.environ.get("SHELL", "sh")]
    # A SIGTERM or SIGHUP stops the command and the cluster as a Ctrl-C does; so
    # does a SIGINT also where it came ignored (a shell's background job gets
    # SIGINT ignored, and Python then installs no handler of its own).
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.default_int_handler)
    print(f"python -m harness cluster: starting {args.nodes} node(s)...", file=sys.stderr, flush=True)
    try:
        with SimulatedCluster.start(args.nodes, cpus_per_node=args.cpus_per_node) as cluster:
            nodes = ", ".join(f"node {n.index} {n.address}" for n in cluster.nodes.nodes)
            print(
                f"python -m harness cluster: Ray at {cluster.address} ({nodes}); "
                f"this command runs in the world, {cluster.nodes.world_address}: {' '.join(command)}",
                file=sys.stderr,
                flush=True,
            )
            proc = cluster.popen(command)
            try:
                return proc.wait()
            except KeyboardInterrupt:
                proc.kill()
                proc.wait()
                return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _chaos(args: argparse.Namespace) -> int:
    """A seeded chaos run (harness.chaos): 0 when it found nothing, 1 on a violation,
    4 on bad input (checked before the run starts: a failure of the run itself is no usage error)."""
    import signal

    from harness.chaos import render, run_chaos
    from harness.chaos.run import check_arguments, write_json

    given: dict[str, Any] = {
        "start_method": args.start_method,
        "soak_share": args.soak_share,
        "shrink_s": args.shrink_time,
        "operations": args.operations,
        "declare": {c.strip(): "declared with --declare" for c in args.declare.split(",") if c.strip()}
        if args.declare
        else None,
    }
    try:
        checked = check_arguments(args.backend, args.world_size, args.duration, **given)
    except (ValueError, TypeError, ImportError) as exc:
        return _usage_error("chaos", str(exc))
    # A SIGTERM stops the run as a Ctrl-C does: the executor it holds is shut down.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    report = run_chaos(args.backend, args.world_size, args.duration, args.seed, **given, checked=checked)
    print(render(report), flush=True)
    if args.json:
        write_json(report, args.json)
    return EXIT_NEGATIVE if report.findings else EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    from harness.report.submission import MANIFEST, SUMS, verify

    # A path that holds no submission at all is a wrong argument, not a submission
    # that failed (1 would read "not conformant" to the CI that asked).
    folder = args.submission
    if not os.path.exists(folder):
        return _usage_error("verify", f"argument submission: {folder!r} does not exist")
    if not os.path.isdir(folder):
        return _usage_error("verify", f"argument submission: {folder!r} is not a folder")
    if not any(os.path.exists(os.path.join(folder, name)) for name in (MANIFEST, SUMS)):
        return _usage_error(
            "verify",
            f"argument submission: {folder!r} holds neither {MANIFEST} nor {SUMS}: "
            "not a folder conform --submission wrote",
        )
    verdict = verify(folder)
    print(verdict.render())
    return verdict.exit_code


def _report(args: argparse.Namespace) -> int:
    """report diff: exit 1 where a cell got worse; report html: the page of a JSON report.
    Exit 4 (usage) on a report that cannot be read."""
    from harness.report.reading import ReportError, read_report

    try:
        if args.report_command == "html":
            from harness.report.html import write_page

            matrix = read_report(args.report)
            out = args.output or os.path.splitext(args.report)[0] + ".html"
            write_page(matrix, out, title=args.title or f"harness conformance report: {os.path.basename(args.report)}")
            print(f"wrote {out}")
            return 0
        from harness.report import diff as report_diff

        old, new = read_report(args.old), read_report(args.new)
    except ReportError as exc:
        return _usage_error(f"report {args.report_command}", str(exc))
    changes = report_diff.diff(old, new)
    paired = report_diff.paired_backends(old, new)
    if paired is not None:
        print(f"comparing backend {paired[0]} ({args.old}) with {paired[1]} ({args.new}), variant by variant")
    print(report_diff.render_text(changes, args.old, args.new))
    if args.md:
        with open(args.md, "w", encoding="utf-8") as f:
            f.write(report_diff.render_markdown(changes, args.old, args.new))
    if args.html:
        from harness.report.html import render_diff_page

        with open(args.html, "w", encoding="utf-8") as f:
            f.write(render_diff_page(changes, args.old, args.new))
    return EXIT_NEGATIVE if any(c.worse for c in changes) else EXIT_OK


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    return value


def _seconds_above_zero(text: str) -> float:
    """An argparse type: a finite number of seconds > 0 (0 s of a run is no run)."""
    value = _number(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def _seconds_from_zero(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0."""
    value = _number(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def _share(text: str) -> float:
    """An argparse type: a share of a whole, >= 0 and < 1 (the rest goes to something else)."""
    value = _number(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 0 and < 1, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; its exit status is the convention of :func:`exit_statuses`
    whatever happens: an unexpected exception is an internal error (3, with its
    traceback), never 1, which reads as a negative verdict."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:  # noqa: BLE001 - whatever a run raises: its traceback, and the status that says so
        import traceback

        traceback.print_exc()
        print(f"{PROG}: internal error (exit status {EXIT_INTERNAL_ERROR}; the traceback above)", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


def _add_conform(sub: argparse._SubParsersAction[_Parser]) -> argparse.ArgumentParser:
    """``conform``: its options are the run's (harness/run_options.py) and its own."""
    conform = sub.add_parser("conform", help="run the conformance suite against a backend and print the matrix")
    for row in RUN_OPTIONS:
        if row.conform:
            _add_run_option(conform, row)
    conform.add_argument(
        "--submission",
        help="write a conformance submission into this new or empty folder: the log, JUnit, JSON and HTML "
        "reports, each test's log, submission.json and SHA256SUMS (check it: python -m harness verify DIR)",
    )
    conform.add_argument("-k", help="only tests matching this pytest -k expression")
    conform.add_argument(
        "--sample",
        action="store_true",
        help="one test of every clause (harness/conformance/sample.py), for a short run; with -k, those it matches",
    )
    conform.add_argument(
        "--full",
        action="store_true",
        help="every test of every variant; by default a backend's other start methods (beside its first) run "
        "one test of every clause, its first every test (a submission always runs every test)",
    )
    conform.set_defaults(func=_conform)
    conform.epilog_factory = _conform_epilog
    return conform


def _add_bench(sub: argparse._SubParsersAction[_Parser]) -> argparse.ArgumentParser:
    """``bench``: yardsticks, and the workloads' options (harness/perf/cli.py)."""
    from harness.perf import cli as perf_cli

    bench = sub.add_parser(
        "bench",
        help="latency: an empty collective_rpc against yardsticks; workloads against a stored baseline, or A/B",
    )
    bench.add_argument("--backend", default="mp", help="backend(s) to measure (default mp)")
    bench.add_argument(
        "--world-size",
        type=_world_sizes,
        default=None,
        help="comma-separated world sizes (default 1,2,4; with workloads, 2)",
    )
    bench.add_argument("--iters", type=_positive_int, default=2000, help="timed calls per measurement (default 2000)")
    bench.add_argument("--quick", action="store_true", help="500 calls per measurement, 2 s idle check")
    bench.add_argument("--json", help="write the figures as JSON to this path")
    perf_cli.add_arguments(bench)
    bench.set_defaults(func=_bench)
    bench.epilog = exit_statuses(
        "a judged metric significantly slower: B than A (--compare), or this run than the stored baseline"
    )
    return bench


def _add_chaos(sub: argparse._SubParsersAction[_Parser]) -> argparse.ArgumentParser:
    """``chaos``: the schedule's seed, length and budget, the soak's share."""
    chaos = sub.add_parser(
        "chaos",
        help="a seeded random schedule of calls and faults judged against SPEC.md, then a soak; "
        "the first violation shrunk to a short sequence",
    )
    chaos.add_argument("--backend", required=True, help="a built-in name, 'module:attr', or an entry point")
    chaos.add_argument("--world-size", type=_positive_int, default=2, help="ranks of each executor (default 2)")
    chaos.add_argument(
        "--duration", type=_seconds_above_zero, default=60.0, help="seconds of the run, soak included (default 60)"
    )
    chaos.add_argument("--seed", type=int, default=0, help="the schedule's seed: the same seed draws the same schedule")
    chaos.add_argument(
        "--operations",
        type=_positive_int,
        default=None,
        help="run the schedule for this many operations, however long they take, instead of its share of "
        "the duration: the same seed then runs the same operations on a loaded machine as on a quiet one "
        "(a violation's replay line names the operation it was found at)",
    )
    chaos.add_argument("--start-method", help="for backends that start processes (default: the backend's first)")
    chaos.add_argument(
        "--soak-share",
        type=_share,
        default=0.3,
        help="the share of the duration given to the soak (default 0.3; 0: no soak)",
    )
    chaos.add_argument(
        "--shrink-time",
        type=_seconds_from_zero,
        default=None,
        help="seconds shrinking a violation may take (default: half the duration, at least 60)",
    )
    chaos.add_argument(
        "--declare",
        help="clauses to treat as declared unsupported, e.g. C7,C20: their operations leave the schedule "
        "(a backend's known failures, set aside to look for new ones)",
    )
    chaos.add_argument("--json", help="write the report as JSON to this path")
    chaos.set_defaults(func=_chaos)
    chaos.epilog = exit_statuses("a violation of SPEC.md was found")
    return chaos


def _add_verify(sub: argparse._SubParsersAction[_Parser]) -> argparse.ArgumentParser:
    """``verify``: a submission's folder."""
    verify = sub.add_parser(
        "verify",
        help="check a conformance submission: conformant, partial or not conformant; exit 0 only if conformant",
    )
    verify.add_argument("submission", help="the folder conform --submission wrote")
    verify.set_defaults(func=_verify)
    verify.epilog = exit_statuses("not conformant, or partial")
    return verify


def _add_report(sub: argparse._SubParsersAction[_Parser]) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """``report diff`` and ``report html``: returns those two parsers."""
    report = sub.add_parser("report", help="read JSON reports: the cells that changed between two, or one as HTML")
    report_sub = report.add_subparsers(dest="report_command", required=True)
    diff = report_sub.add_parser(
        "diff", help="the cells whose outcome changed between two runs, with their tests; exit 1 if any got worse"
    )
    diff.add_argument("old", help="the earlier run's --report-json")
    diff.add_argument("new", help="the later run's --report-json")
    diff.add_argument("--md", help="also write the changes as Markdown to this path")
    diff.add_argument("--html", help="also write the changes as one HTML page to this path")
    page = report_sub.add_parser("html", help="one self-contained HTML page of a --report-json report")
    page.add_argument("report", help="a --report-json report")
    page.add_argument("-o", "--output", help="the page's path (default: the report's, ending in .html)")
    page.add_argument("--title", help="the page's title")
    report.set_defaults(func=_report)
    report.epilog = exit_statuses("report diff: a cell got worse")
    diff.epilog = exit_statuses("a cell got worse")
    page.epilog = exit_statuses(None)
    return diff, page


def _add_docs(sub: argparse._SubParsersAction[_Parser]) -> argparse.ArgumentParser:
    """``docs``: the shipped documents."""
    from harness.contract import SHIPPED_DOCS

    docs = sub.add_parser("docs", help="where the contract (SPEC.md) and the implementers' guide are; or print one")
    docs.add_argument("name", nargs="?", choices=SHIPPED_DOCS, help="print this document")
    docs.set_defaults(func=_docs)
    docs.epilog = exit_statuses(None)
    return docs


def _add_cluster(sub: argparse._SubParsersAction[_Parser]) -> argparse.ArgumentParser:
    """``cluster``: a simulated Ray cluster around a command."""
    cluster = sub.add_parser(
        "cluster",
        help="run a command (default: a shell) as a driver of a multi-node Ray cluster simulated on this machine",
    )
    cluster.add_argument("--nodes", type=_positive_int, default=2, help="nodes of the cluster (default 2)")
    cluster.add_argument(
        "--cpus-per-node", type=_positive_int, default=2, help="logical CPUs Ray gives each node (default 2)"
    )
    cluster.epilog = exit_statuses(
        "(the command's own status, whatever it is: it is passed on)",
        "After --, the command and its arguments; it gets RAY_ADDRESS and the cluster's token. The exit "
        f"status is the command's; {EXIT_INTERRUPTED} when interrupted, {EXIT_NOTHING_RUN} where simulated "
        "nodes cannot be made here.",
    )
    return cluster


def _main(argv: Sequence[str] | None) -> int:
    parser = _Parser(prog=PROG, description=__doc__, epilog=exit_statuses("a negative verdict (see each command)"))
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)
    _add_conform(sub)
    bench = _add_bench(sub)
    chaos = _add_chaos(sub)
    _add_verify(sub)
    diff, page = _add_report(sub)
    _add_docs(sub)
    cluster = _add_cluster(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    after = argv.index("--") if "--" in argv else len(argv)
    argv, command = argv[:after], argv[after + 1 :]
    args, rest = parser.parse_known_args(argv)
    if args.command == "cluster":
        if rest:
            cluster.error(f"unrecognized arguments: {' '.join(rest)} (the command goes after --)")
        return _cluster(args, command)
    if command:
        argv += ["--", *command]
        args, rest = parser.parse_known_args(argv)
    if args.command == "conform":
        return _conform(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "chaos":
        check_writable(chaos, "--json", args.json)
    if args.command == "report" and args.report_command == "diff":
        check_writable(diff, "--md", args.md)
        check_writable(diff, "--html", args.html)
    if args.command == "report" and args.report_command == "html":
        check_writable(page, "--output", args.output)
    if args.command == "bench":
        from harness.perf import cli as perf_cli

        workloads = perf_cli.wants_workloads(args)
        args.world_size_explicit = args.world_size is not None
        if args.world_size is None:
            args.world_size = [2] if workloads else [1, 2, 4]
        _check_bench_args(bench, args)
        if workloads:
            perf_cli.check(bench, args)
            return perf_cli.run(args)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
