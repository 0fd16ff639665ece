"""The options of a run of the suite, in one table.

Each row is one setting, and everything that takes it is made from the row:

    RUN_OPTIONS ──► the pytest plugin: --harness-NAME, its short form --NAME
      │             (where no other plugin took it), the ini key, the environment
      │             variable (harness.pytest_plugin.options)
      └─────────► python -m harness conform: --NAME, passed on to pytest as
                    --harness-NAME (harness.__main__), and its --help

So an option's help reads the same in ``pytest --help`` and in ``conform
--help``, and an option added here reaches both. No import but the standard
library's: ``python -m harness`` builds its parser from this table without
loading pytest.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["INI_ONLY", "RUN_OPTIONS", "RunOption", "run_option"]


@dataclass(frozen=True)
class RunOption:
    """One setting of a run: ``--harness-NAME`` in pytest."""

    name: str
    help: str
    #: The environment variable that sets it where the command line does not.
    env: str | None = None
    #: The ini key that sets it where neither the command line nor the environment does.
    ini: str | None = None
    #: Takes no value: given or not (its environment variable: 1 or 0).
    flag: bool = False
    #: pytest also takes ``--NAME``, where no other plugin or conftest registered it.
    short: bool = True
    #: ``python -m harness conform`` takes ``--NAME`` and passes it on.
    conform: bool = True

    @property
    def option(self) -> str:
        """The plugin's own name for it: ``--harness-NAME``."""
        return f"--harness-{self.name}"

    @property
    def short_form(self) -> str:
        return f"--{self.name}"

    @property
    def dest(self) -> str:
        """Where pytest keeps its value (``config.getoption(dest)``)."""
        return "harness_" + self.name.replace("-", "_")

    @property
    def conform_dest(self) -> str:
        """Where ``conform``'s parser keeps its value."""
        return self.name.replace("-", "_")


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption(
        "backend",
        "backends under test, comma-separated: built-in names (uni, mp, ray, ...), "
        "'module:attr' factories, or harness.backends entry points",
        env="HARNESS_BACKEND",
        ini="harness_backends",
    ),
    RunOption(
        "world-size",
        "world sizes to run, comma-separated (default 1,2,4; each backend keeps those it supports)",
        env="HARNESS_WORLD_SIZE",
        ini="harness_world_sizes",
    ),
    RunOption(
        "start-method",
        "start methods to run, comma-separated, each at every world size (default: every one a backend "
        "supports: its first at every world size, the others at one, 2 where selected)",
        env="HARNESS_START_METHOD",
        ini="harness_start_methods",
    ),
    RunOption(
        "clause", "only the tests of these clauses, by exact id, comma-separated (e.g. C1,C4)", env="HARNESS_CLAUSE"
    ),
    RunOption("declare", "clauses to treat as declared unsupported for every backend, comma-separated (e.g. C12,C22)"),
    RunOption(
        "timeout",
        "seconds after which an isolated test is killed with its process group (default 300)",
        env="HARNESS_TIMEOUT",
        ini="harness_timeout",
        short=False,  # pytest-timeout's --timeout
    ),
    RunOption(
        "isolate",
        "run each (test, backend) pair in a fresh forked process (default on; 'no' to run in-process)",
        conform=False,
    ),
    RunOption(
        "jobs",
        "isolated tests to run side by side, each in its own process group: a number, or 'auto' "
        "(the default: twice the CPU count, at most 8); tests marked harness_exclusive run alone",
        env="HARNESS_JOBS",
        ini="harness_jobs",
    ),
    RunOption(
        "require-gpus",
        "fail, instead of skipping, GPU tests that need at most N GPUs when the machine has fewer "
        "(a GPU runner that lost its GPUs must not read green)",
        env="HARNESS_REQUIRE_GPUS",
    ),
    RunOption(
        "nodes",
        "node counts to run, comma-separated (default 1): a count above 1 runs each backend that declares it "
        "across that many simulated nodes (a Ray cluster in network namespaces; needs root), or across the "
        "real cluster RAY_ADDRESS names; a backend that does not declare it reads not applicable",
        env="HARNESS_NODES",
        ini="harness_nodes",
    ),
    RunOption(
        "require-nodes",
        "fail, instead of reading not run, the multi-node variants that cannot run here "
        "(no root for network namespaces): a multi-node runner that lost them must not read green",
        env="HARNESS_REQUIRE_NODES",
        flag=True,
    ),
    RunOption(
        "seed",
        "the seed of the tensor-parallel checks' weights and inputs (default 0); a failure prints it, "
        "so the same run replays",
        env="HARNESS_SEED",
    ),
    RunOption(
        "expected-failures",
        "a file of known failures ('<test id pattern>  <clause>: <reason>' per line), run as strict xfails "
        "for every backend; a backend may name its own (its factory's expected_failures)",
        env="HARNESS_EXPECTED_FAILURES",
        conform=False,
    ),
    RunOption(
        "sample",
        "backends, or a backend with one start method, that run one test of every clause "
        "(harness/conformance/sample.py) instead of every test, e.g. 'mp/spawn,mp/forkserver' "
        "(for a short run: the others run in full)",
        env="HARNESS_SAMPLE",
        ini="harness_sample",
        short=False,
        conform=False,  # conform's --sample is its own: every backend's sample
    ),
    RunOption(
        "sample-others",
        "where the start methods are the default, a backend's other start methods run the sample "
        "(one test of every clause, harness/conformance/sample.py); its first runs every test "
        "(python -m harness conform does this unless given --full)",
        env="HARNESS_SAMPLE_OTHERS",
        flag=True,
        short=False,
        conform=False,
    ),
    RunOption("report-json", "write the clause matrix as JSON to this path"),
    RunOption("report-md", "write the clause matrix as Markdown to this path"),
    RunOption("test-logs", "write each test's own log (its reports, failure text and output) into this folder"),
    RunOption(
        "report-html", "write the clause matrix as one self-contained HTML page, each cell's evidence a click away"
    ),
    RunOption(
        "keep-leftovers",
        "keep what each test's processes left (segments, semaphores, files in its temporary folder) for "
        "debugging, instead of removing it after the test (they are reported either way)",
        flag=True,
        short=False,
        conform=False,
    ),
)

#: Settings an ini file alone gives, by key.
INI_ONLY = {
    "harness_backend_world_sizes": (
        "world sizes for particular backends, or a backend with one start method, e.g. 'ray=2' or "
        "'ray=2,4; mp=1,2; mp/fork=2' (ini only); used when no world size is given on the command line "
        "or in HARNESS_WORLD_SIZE"
    ),
}

_BY_DEST = {option.dest: option for option in RUN_OPTIONS}


def run_option(dest: str) -> RunOption:
    """The row of the option pytest keeps at ``dest`` (``harness_world_size``)."""
    return _BY_DEST[dest]
