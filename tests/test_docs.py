"""The documentation a newcomer reads: every relative link resolves (a file, and a heading for an anchor),
the FAQ names every error code the service answers, and the reference every field of its answers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from kons_service.core import errors as core_errors
from kons_service.http import errors as edge_errors
from kons_service.http import schemas
from testkit.processes import REPO

PAGES = sorted([REPO / "README.md", REPO / "CHANGELOG.md", REPO / "benchmarks" / "README.md",
                *(REPO / "docs").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_anchor(h) for h in HEADING.findall(FENCE.sub("", page.read_text()))}


def test_the_anchor_rule_is_githubs() -> None:
    assert _anchor("413 `batch_too_large`") == "413-batch_too_large"
    assert _anchor("The client gives up while the service restarts") == \
        "the-client-gives-up-while-the-service-restarts"
    assert _anchor("Records: named values, categories and gaps") == "records-named-values-categories-and-gaps"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.relative_to(REPO)}: {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.relative_to(REPO)}: {target} (no such heading)"


def _codes() -> dict[str, int]:
    """Every error code the service answers, with its HTTP status."""
    def subclasses(cls: type[core_errors.ServiceError]) -> list[type[core_errors.ServiceError]]:
        return [cls, *(sub for direct in cls.__subclasses__() for sub in subclasses(direct))]

    codes = {}
    for cls in subclasses(core_errors.ServiceError):
        if cls.code == core_errors.ServiceError.code:  # the base and the abstract RetryLaterError
            continue
        answer = next(edge_errors.ANSWERS[c] for c in cls.__mro__ if c in edge_errors.ANSWERS)
        codes[cls.code] = answer.status
    for error, answer in edge_errors.ANSWERS.items():
        code = answer.code or getattr(error, "code", None)
        if code is not None and code != core_errors.ServiceError.code:
            codes[code] = answer.status
    codes |= {code: status for status, code in edge_errors._STATUS_CODES.items()}
    codes |= {"validation_error": 422, "internal_error": 500, "store_full": 503}
    return codes


def test_the_faq_names_every_error_code_under_its_status() -> None:
    headings = set(HEADING.findall((REPO / "docs" / "faq.md").read_text()))
    codes = _codes()
    assert len(codes) >= 20
    missing = {code: status for code, status in codes.items() if f"{status} `{code}`" not in headings}
    assert not missing, missing


ANSWERS: list[type[BaseModel]] = [
    schemas.PredictResponse, schemas.BatchPredictResponse, schemas.FeedbackResponse,
    schemas.BatchFeedbackResponse, schemas.LearnerSummary, schemas.LearnerInfo, schemas.LearnerList,
    schemas.LearnerHistory, schemas.HistoryPoint, schemas.ErrorTotals, schemas.CoverageTotals,
    schemas.CalibrationTotals, schemas.ChangeEvent,
    schemas.StateImported, schemas.ErrorDetail, schemas.RollbackEvent, schemas.LearnerVersions,
    schemas.VersionPoint, schemas.RolledBack,
]


def test_the_reference_describes_every_field_of_every_answer() -> None:
    reference = (REPO / "docs" / "reference.md").read_text()
    for model in ANSWERS:
        assert model.__name__ in reference, model.__name__
        missing = [name for name in model.model_fields if f"`{name}`" not in reference]
        assert not missing, (model.__name__, missing)
