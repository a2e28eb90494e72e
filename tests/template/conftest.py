"""Fixtures of the template tests: ``template.yaml`` as written and as SAM transforms it, once per module."""

from __future__ import annotations

from typing import Any

import pytest

from tally_local.template import load_template
from tests.template.test_template import TEMPLATE_PATH, sam_transform


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(TEMPLATE_PATH)


@pytest.fixture(scope="module")
def transformed(template: dict[str, Any]) -> dict[str, Any]:
    return sam_transform(template)
