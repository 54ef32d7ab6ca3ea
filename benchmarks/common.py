"""What every benchmark needs around its measurements: provenance, Markdown tables and BLAS limits.

* Provenance: the command line that reproduces a report (:func:`command_line`), the checkout's commit
  (:func:`git_commit`) and the machine (:func:`machine` as a record, :func:`machine_summary` as a line).
* :func:`markdown_table`: the lines of a table, one row per sequence of cells; :func:`method_label` and
  :func:`metric_cell` the cells of a method and of its figure in the tables of the benchmarks that run
  River's defaults of ``benchmarks/raw_regime.py``.
* Where results go: :func:`results_dir` (the directory named by ``--out``, else a fresh temporary one:
  a run never overwrites the committed ``benchmarks/results`` unless asked to); :func:`require_datasets`
  stops a run whose data files are missing with a message and exit code 2; :func:`run_and_publish` is the
  end of a benchmark's ``main`` that stamps, runs, and writes and prints its report.
* BLAS threads: :func:`blas_threads` limits them in this process, :func:`blas_env` in a child process.
  On shared cores a second BLAS thread makes timings wait on a busy core (``scaling.md`` has figures),
  so benchmarks run with one.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

__all__ = ["REPO", "blas_env", "blas_threads", "command_line", "git_commit", "machine", "machine_summary",
           "markdown_table", "method_label", "metric_cell", "module_at", "require_datasets", "results_dir",
           "run_and_publish", "text_at"]

REPO = Path(__file__).resolve().parents[1]
#: The environment variables that fix the thread pools of OpenBLAS, OpenMP and MKL when a process starts.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


# ------------------------------------------------------------------------------------------- inputs, outputs
def results_dir(out: Path | None, benchmark: str) -> Path:
    """``out`` (created), or a new temporary directory when none is named; says where on stderr."""
    if out is None:
        out = Path(tempfile.mkdtemp(prefix=f"kons-{benchmark}-"))
        print(f"{benchmark}: results go to {out} (name a directory with --out)", file=sys.stderr, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    return out


def require_datasets(names: Iterable[str], benchmark: str) -> None:
    """Exit with code 2 and a message (no traceback) unless every data set ``names`` is in the data
    directory (:func:`kons.datasets.data_dir`)."""
    from kons.datasets import data_dir

    try:
        root = data_dir()
    except FileNotFoundError as exc:
        _usage_error(f"{benchmark}: {exc} (the benchmark data sets: see docs/bench-protocol.md).")
    missing = [n for n in names if not any((root / f"{n}.{ext}.gz").exists() for ext in ("csv", "libsvm"))]
    if missing:
        _usage_error(f"{benchmark}: no data set {', '.join(missing)} in {root} (KONS_BENCH_DATA_DIR).")


def run_and_publish(module: str, argv: Sequence[str] | None, *, name: str, out: Path | None,
                    sources: Sequence[str], run: Callable[[], dict[str, Any]],
                    page: Callable[[dict[str, Any], str], str], indent: int = 1) -> int:
    """The end of a benchmark's ``main``, once its arguments are parsed: stamp the provenance of
    ``sources`` first (the code imported now is what runs), ``run()`` the measurements, render their
    record as a report with ``page(record, command)`` (``command``: :func:`command_line` of ``module``
    and ``argv``, without ``--out``), write both as ``name.md`` and ``name.json`` into ``out``
    (:func:`results_dir`; :func:`benchmarks.provenance.publish`, the JSON indented by ``indent``) and
    print the report. Returns ``main``'s exit status."""
    from benchmarks.provenance import provenance, publish  # (it imports this module)

    stamp = provenance(sources)
    record = run()
    text = page(record, command_line(module, argv, outputs=("--out",)))
    publish(results_dir(out, name), name, stamp, text, record, indent=indent)
    print(text)
    return 0


def _usage_error(message: str) -> NoReturn:
    """Exit as argparse does on bad usage: the message on stderr, exit code 2, no traceback."""
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(2)


# ---------------------------------------------------------------------------------------------- provenance
def command_line(module: str, argv: Sequence[str] | None = None, *, outputs: Sequence[str] = ()) -> str:
    """``python -m module ARGS``, quoted for a shell; ``argv`` defaults to this process's arguments.

    The options named in ``outputs`` (and their values) are left out: they choose where results are
    written, not what is measured.
    """
    words, kept = list(sys.argv[1:] if argv is None else argv), []
    while words:
        word = words.pop(0)
        if word in outputs:
            words = words[1:]
        elif not word.startswith(tuple(f"{option}=" for option in outputs)):
            kept.append(word)
    return " ".join(["python -m", module, *map(shlex.quote, kept)])


def text_at(revision: str, path: str) -> str:
    """The text of the checkout's file ``path`` at git ``revision``."""
    return subprocess.run(["git", "show", f"{revision}:{path}"], cwd=REPO, check=True, capture_output=True,
                          text=True).stdout


def module_at(revision: str, path: str, directory: Path) -> ModuleType:
    """The Python module ``path`` of the checkout as it was at git ``revision`` (written into
    ``directory``), imported beside this checkout's own under the name ``<its name>_baseline``."""
    name = f"{Path(path).stem}_baseline"
    (directory / f"{name}.py").write_text(text_at(revision, path))
    spec = importlib.util.spec_from_file_location(name, directory / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def git_commit(paths: Sequence[str] = ("kons", "kons_service", "benchmarks", "testkit")) -> str:
    """The checkout's short commit, with ``+dirty`` when ``paths`` have local changes (``unknown``
    outside a git checkout). Read it when a run starts: the code that runs is the code imported then.
    ``benchmarks/results`` is not code: a result written by an earlier run and not yet committed does not
    make a later run's code dirty."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
        code = [*paths, ":(exclude)benchmarks/results"]
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *code], cwd=REPO, capture_output=True,
                               text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _cpus() -> int:
    """The CPUs this process may run on (fewer than the machine's under a CPU affinity mask)."""
    with contextlib.suppress(AttributeError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def _version(module: str) -> str:
    try:
        return str(getattr(importlib.import_module(module), "__version__", "installed"))
    except ImportError:
        return "missing"


def machine(*modules: str) -> dict[str, Any]:
    """What the numbers are measured on, now: platform, Python, CPUs and their load, and the versions of
    ``modules`` (import names; ``missing`` when one is not installed)."""
    return {"platform": platform.platform(), "python": platform.python_version(), "cpus": _cpus(),
            "cpu": _cpu_model(), "load_average": list(os.getloadavg()),
            "versions": {m: _version(m) for m in modules},
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def machine_summary() -> str:
    """One line for a report: architecture, operating system, Python and the CPUs this process may use."""
    return (f"{platform.machine()}, {platform.system()} {platform.release()}, Python "
            f"{platform.python_version()}, {_cpus()} CPU(s)")


# ---------------------------------------------------------------------------------------------- Markdown
def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> list[str]:
    """The lines of a Markdown table; ``align`` has a letter per column, ``l`` (the default) or ``r``."""

    def line(cells: Sequence[object]) -> str:
        return "| " + " | ".join(map(str, cells)) + " |"

    rule = "|" + "".join("---:|" if a == "r" else "---|" for a in align.ljust(len(header), "l"))
    return [line(header), rule, *map(line, rows)]


# ---------------------------------------------------------------------------------------------- BLAS
def method_label(key: str, own: Mapping[str, str]) -> str:
    """A method's name in a Markdown table: the benchmark's ``own`` label for it, else the label of River's
    default of that key in ``benchmarks/raw_regime.py`` (its pipes escaped)."""
    if key in own:
        return own[key]
    from benchmarks.raw_regime import RAW_METHODS  # (it imports this module)

    return RAW_METHODS[key].label.replace("|", "\\|")


def metric_cell(value: float) -> str:
    """A figure in a Markdown table, "failed" where the method's plays were not finite."""
    return "failed" if not math.isfinite(value) else f"{value:.4f}"


@contextlib.contextmanager
def blas_threads(threads: int | None) -> Iterator[str]:
    """Limit the BLAS threads of this process to ``threads`` (``None``: no limit) with threadpoolctl if it
    is installed; yields what was done, for the report."""
    if threads is None:
        yield "BLAS threads not limited"
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield "BLAS threads not limited (threadpoolctl missing)"
        return
    with threadpool_limits(limits=threads):
        yield f"BLAS limited to {threads} thread(s)"


def blas_env(threads: int | None) -> dict[str, str]:
    """The environment variables that give a child process ``threads`` BLAS threads (none for ``None``)."""
    return {} if threads is None else dict.fromkeys(BLAS_THREAD_VARIABLES, str(threads))
