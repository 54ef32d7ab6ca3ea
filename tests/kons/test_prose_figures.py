"""Measured figures belong in docs/ and benchmarks/results/, not in ``kons/``'s docstrings and comments (the
guide's rule; issue 36 counted 183 there). A figure here is a decimal number or a percentage in prose:
``0.0767``, ``+1.8%``, ``1.15x`` (integers such as a row count or a constant's value are not counted)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d+|\d+)(?:%|x\b)|(?<![\w.])[-+]?\d+\.\d+(?![\w.])")
#: The figures left in ``kons/``'s prose after issue 36's first half, 256 before it by this count: what is
#: left are parameter defaults, equation and section numbers, label values and sizes computed from a formula.
MOST = 60


def prose(source: str) -> list[str]:
    """The docstrings and comments of a Python source."""
    texts = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            texts += [_without_examples(doc)] if doc else []
    return texts


def _without_examples(doc: str) -> str:
    """A docstring without its doctest examples (from a ``>>>`` line to the next blank line): what they
    print is checked, not measured."""
    kept, example = [], False
    for line in doc.split("\n"):
        example = line.strip().startswith(">>>") or (example and bool(line.strip()))
        if not example:
            kept.append(line)
    return "\n".join(kept)


def figures(root: Path) -> dict[str, int]:
    """The figures in the prose of each module under ``root/kons`` that has some."""
    counts = {}
    for path in sorted((root / "kons").rglob("*.py")):
        found = sum(len(FIGURE.findall(text)) for text in prose(path.read_text()))
        if found:
            counts[str(path.relative_to(root))] = found
    return counts


def test_the_counter_counts_figures_and_not_code() -> None:
    assert FIGURE.findall("error 0.277 -> 0.215, +1.8%, 1.15x the oracle, 26 sets, MAX_COLUMNS + 1") == [
        "0.277", "0.215", "+1.8%", "1.15x"]
    assert prose('"""doc 0.5\n\n>>> f(0.25)\n0.75\n"""\nx = 1.5  # why 2.5\n') == ["# why 2.5", "doc 0.5\n\n"]


def test_kons_prose_holds_few_measured_figures() -> None:
    counts = figures(ROOT)
    assert sum(counts.values()) <= MOST, counts
