"""``/docs`` and ``/redoc`` in headless Chromium with the network off but for the service: the pages load
their scripts from the package, ask for the API key, then render the document and Swagger UI's Authorize
button holds the key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.browser import CHROMIUM, OFFLINE, chromium
from testkit.processes import ServiceProcess, services_on_redis

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (scripts/test.sh installs Debian's "
                                                "chromium when run as root)"),
]

KEY = "key-a"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with services_on_redis(tmp_path_factory.mktemp("docs"), api_keys=f"acme:{KEY}") as (_, (svc,)):
        yield svc


def test_swagger_ui_renders_offline_with_the_key_in_its_authorize_button(service: ServiceProcess,
                                                                         tmp_path: Path) -> None:
    dom = chromium(f"{service.url}/docs#key={KEY}", tmp_path, *OFFLINE, "--dump-dom")
    assert 'class="btn authorize locked"' in dom  # the Authorize button, holding the key
    assert dom.count('id="operations-') > 20  # every route of the document, in its tag's section
    for operation in ("create_learner", "predict", "feedback", "v2_infer"):
        assert f"-{operation}\"" in dom, operation
    assert 'id="keyform"' in dom and 'id="status"' not in dom  # the form stays hidden, the status is gone


def test_without_a_key_the_page_asks_for_one(service: ServiceProcess, tmp_path: Path) -> None:
    dom = chromium(f"{service.url}/docs", tmp_path, *OFFLINE, "--dump-dom")
    assert 'data-state="unauthorized"' in dom and "needs an API key" in dom
    assert "display: block" in dom and "operations-" not in dom


def test_redoc_renders_offline(service: ServiceProcess, tmp_path: Path) -> None:
    dom = chromium(f"{service.url}/redoc#key={KEY}", tmp_path, *OFFLINE, "--dump-dom")
    assert "kons service" in dom and dom.count("operation/") > 20
    assert 'data-state="unauthorized"' not in dom
