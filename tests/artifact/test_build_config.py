"""How ``sam build`` is told to make the package: template.yaml and src/Makefile must agree (offline).

SAM hands a Makefile build no architecture, so src/Makefile has a default of its own: it must be the
architecture the template deploys, or a plain ``sam build`` would package another machine's libraries.
"""

from __future__ import annotations

import re

import pytest

from tally.local.template import load_template
from tests.artifact.build import DEPLOYED_ARCHITECTURE, FUNCTIONS, REPO_ROOT, TEMPLATE


def test_the_makefiles_default_architecture_is_the_templates() -> None:
    makefile = (REPO_ROOT / "src" / "Makefile").read_text(encoding="utf-8")
    default = re.search(r"^TALLY_LAMBDA_ARCH \?= (\S+)$", makefile, re.MULTILINE)
    assert default is not None, "src/Makefile must default TALLY_LAMBDA_ARCH"
    template = load_template(TEMPLATE)
    assert template["Globals"]["Function"]["Architectures"] == [default.group(1)] == [DEPLOYED_ARCHITECTURE]
    for function in FUNCTIONS:
        assert "Architectures" not in template["Resources"][function]["Properties"], function


@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_function_is_built_by_its_makefile_target(function: str) -> None:
    resource = load_template(TEMPLATE)["Resources"][function]
    assert resource["Metadata"]["BuildMethod"] == "makefile"
    makefile = (REPO_ROOT / resource["Properties"]["CodeUri"] / "Makefile").read_text(encoding="utf-8")
    targets = re.search(r"^(build-\S+(?: build-\S+)*):", makefile, re.MULTILINE)
    assert targets is not None
    assert f"build-{function}" in targets.group(1).split()
