"""``python -m bench NAME``: one runner over the registry of experiments (bench/__main__.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from bench.__main__ import EXPERIMENTS, main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_every_registered_experiment_is_a_runnable_module(name: str) -> None:
    spec = importlib.util.find_spec(EXPERIMENTS[name].module)
    assert spec is not None
    assert spec.origin is not None
    # a package runs its __main__ module, a module its own __main__ block
    origin = Path(spec.origin)
    source = (origin.parent / "__main__.py" if origin.name == "__init__.py" else origin).read_text()
    assert 'if __name__ == "__main__":' in source


def test_every_bench_target_of_the_makefile_goes_through_the_runner() -> None:
    makefile = (ROOT / "Makefile").read_text()
    commands = re.findall(r"\$\(BIN\)/python -m (bench\S*) (\S+)", makefile)
    assert commands, "no bench command found in the Makefile"
    for module, name in commands:
        assert module == "bench", f"make runs python -m {module}: use python -m bench NAME"
        assert name in EXPERIMENTS


def test_the_runner_lists_its_experiments_and_refuses_an_unknown_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in EXPERIMENTS)
    assert main(["no-such-experiment"]) == 2
    assert "no experiment 'no-such-experiment'" in capsys.readouterr().err


# runpy warns when the module was imported before (other tests here import it); python -m bench runs it fresh
@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import of package:RuntimeWarning")
def test_the_runner_hands_the_experiment_its_own_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["latency-proxy", "--help"]) == 0
    assert "--upstream" in capsys.readouterr().out
    assert main(["latency-proxy", "--no-such-option"]) == 2
