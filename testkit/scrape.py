"""Reading Prometheus exposition text in tests and benchmarks."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["samples", "value"]


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample named ``name`` (the full sample name, e.g. ``kons_learner_rounds_total``)."""
    return [(dict(s.labels), s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]


def value(text: str, name: str, **labels: str) -> float | None:
    """The sum of the samples named ``name`` whose labels include ``labels`` (None if there is none)."""
    found = [v for sample_labels, v in samples(text, name) if labels.items() <= sample_labels.items()]
    return sum(found) if found else None
