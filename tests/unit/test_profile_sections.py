"""Profiles in sections shaped like vLLM's config: the renderer takes each flag's name from the section field (the
vLLM dest) and the flag table, old flat files still load with a notice, and no built-in profile renders a byte
differently from before the sections.

tests/data/profiles_flat/ holds every built-in profile (and examples/cpu-lab-rollout.yaml) as it was written before
the sections, with ``<name>.rendered.json``: the argv, ``--config`` file and env file the renderer produced from it
then (recorded at the commit before the sections; since issue 27 every release that has it also renders
``--enable-server-load-tracking``, the sentinel's in-flight count, appended after the rest).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from vllm_fleet.cli.commands import app
from vllm_fleet.fleet.spec import plan_fleet
from vllm_fleet.profiles.loader import ProfileError, builtin_profile_names, load_profile, parse_profile
from vllm_fleet.profiles.model import SECTIONS, DecodeProfile, ProfileLayoutWarning, SpeculativeConfig, lift_flat_layout
from vllm_fleet.profiles.render import ARGV_ORDER, config_yaml, env_file, render
from vllm_fleet.vllm import flags

ROOT = Path(__file__).parents[2]
FLAT = ROOT / "tests/data/profiles_flat"
EXAMPLES = {"cpu-lab-rollout": ROOT / "examples/cpu-lab-rollout.yaml"}


def sectioned_ref(name: str) -> str:
    return str(EXAMPLES[name]) if name in EXAMPLES else name


def outputs(profile: DecodeProfile) -> dict[str, Any]:
    rendered = render(profile)
    return {"argv": rendered.argv, "config_yaml": config_yaml(profile, rendered), "env": env_file(rendered)}


def test_every_built_in_profile_has_its_flat_original() -> None:
    assert {p.stem for p in FLAT.glob("*.yaml")} == set(builtin_profile_names()) | set(EXAMPLES)
    assert {p.name.removesuffix(".rendered.json") for p in FLAT.glob("*.rendered.json")} == {
        p.stem for p in FLAT.glob("*.yaml")
    }


@pytest.mark.parametrize("name", sorted(p.stem for p in FLAT.glob("*.yaml")))
def test_sectioned_profile_renders_byte_identical_to_its_flat_original(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProfileLayoutWarning)  # the catalog is written in sections
        new = load_profile(sectioned_ref(name))
    with pytest.warns(ProfileLayoutWarning):
        old = load_profile(str(FLAT / f"{name}.yaml"))
    recorded = json.loads((FLAT / f"{name}.rendered.json").read_text())
    assert outputs(new) == recorded  # argv, --config file and env, byte for byte as before the sections
    assert outputs(old) == recorded
    assert new == old  # the flat file, read as sections, is the same profile


def test_flat_file_notice_names_each_moved_key_and_its_section() -> None:
    with pytest.warns(ProfileLayoutWarning) as caught:
        load_profile(str(FLAT / "cpu-lab.yaml"))
    (warning,) = caught
    assert isinstance(warning.message, ProfileLayoutWarning)
    moved = dict(warning.message.moved)
    assert moved == {
        "model": "model.model",
        "model_path": "model.path",
        "served_model_name": "model.served_model_name",
        "kv_cache_memory_bytes": "cache.kv_cache_memory_bytes",
        "max_model_len": "model.max_model_len",
        "max_num_seqs": "scheduler.max_num_seqs",
        "max_num_batched_tokens": "scheduler.max_num_batched_tokens",
        "enable_chunked_prefill": "scheduler.enable_chunked_prefill",
        "enable_prefix_caching": "cache.enable_prefix_caching",
        "enforce_eager": "model.enforce_eager",
        "dtype": "model.dtype",
    }
    assert "max_num_seqs -> scheduler.max_num_seqs" in str(warning.message)


def test_validate_explains_the_new_layout_for_a_flat_file() -> None:
    path = FLAT / "cpu-lab-rollout.yaml"
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stderr.split())  # the terminal may wrap a long finding
    assert f"{path}: shutdown_timeout: info: moved to frontend.shutdown_timeout" in text
    assert f"{path}: model_path: info: moved to model.path" in text
    assert f"{path}: (layout): info: profiles are sectioned like vLLM's config" in text
    for section, model in SECTIONS.items():
        assert f"{section}: {', '.join(model.model_fields)}" in text
    sectioned = CliRunner().invoke(app, ["validate", str(EXAMPLES["cpu-lab-rollout"])])
    assert sectioned.exit_code == 0 and "(layout)" not in sectioned.output and "moved to" not in sectioned.output


def test_a_key_set_flat_and_in_its_section_is_refused_naming_both() -> None:
    data = {**yaml.safe_load((ROOT / "vllm_fleet/catalog/profiles/cpu-lab.yaml").read_text()), "max_num_seqs": 4}
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "x")
    (problem,) = err.value.problems
    assert problem.field == "max_num_seqs" and "scheduler.max_num_seqs" in problem.message


def test_flat_keys_join_a_section_the_file_already_has() -> None:
    lifted, moved = lift_flat_layout({"model": {"model": "a/b"}, "model_path": "/m", "port": 9000, "gpus": 2})
    assert lifted == {"model": {"path": "/m", "model": "a/b"}, "frontend": {"port": 9000}, "gpus": 2}
    assert moved == [("model_path", "model.path"), ("port", "frontend.port")]


def test_flat_host_overrides_are_moved_with_a_notice_naming_the_host() -> None:
    stack = yaml.safe_load((ROOT / "Pulumi.example.yaml").read_text())
    fleet = stack["config"]["vllm-fleet:fleet"]
    fleet["hosts"][0]["overrides"] = {"max_num_seqs": 12}
    with pytest.warns(ProfileLayoutWarning, match=r"hosts\[0\]\(gpu-4090-a\)\.overrides.*scheduler\.max_num_seqs"):
        node = plan_fleet(fleet).nodes[0]
    assert node.vllm_config["max-num-seqs"] == 12


def test_every_section_field_is_a_vllm_argument_found_by_the_table() -> None:
    """A section field's name is the dest: the table knows it, and the newest release lacks only the fields whose
    removal the renderer reports (a release that renames one shows up here, and as a problem naming it)."""
    dests = {d for name, m in SECTIONS.items() if name != "speculative" for d in m.model_fields} - {"model", "path"}
    assert dests <= set(ARGV_ORDER)
    assert all(flags.ever_known(d) for d in dests)
    newest = flags.known_versions()[-1]
    assert {d for d in dests if not flags.has_arg(newest, d)} == {"swap_space", "calculate_kv_scales"}
    assert flags.ever_known(SpeculativeConfig.dest)


VLLM_GROUPS = {"speculative": {"SpeculativeConfig", "VllmConfig"}, "frontend": {"Frontend"}}
"""vLLM's argument group of each section whose class is not named as the group (the others: ModelConfig...)."""


def test_each_section_follows_the_vllm_config_group_of_its_fields() -> None:
    """vLLM's parser puts each argument in a group named after its config class; the table records it, so a field
    vLLM moves to another config (a section that no longer matches vLLM's) is found here, for every release."""
    checked = 0
    for name, model in SECTIONS.items():
        want = VLLM_GROUPS.get(name, {model.__name__})
        flag_fields = [d for d in model.model_fields if d not in model.not_flags]
        dests = [SpeculativeConfig.dest] if model is SpeculativeConfig else flag_fields
        for dest in dests:
            for version in flags.present_in(dest):
                spec = flags.arg_spec(version, dest)
                assert spec is not None
                if spec.group is not None:  # before 0.8.5 vLLM's groups had no config names
                    assert spec.group in want, (name, dest, version, spec.group)
                    checked += 1
    assert checked > 500  # the groups are really there: ~20 dests over ~45 releases


def test_a_dest_the_pinned_release_lacks_is_a_problem_naming_the_section_field_and_release() -> None:
    data = yaml.safe_load((ROOT / "vllm_fleet/catalog/profiles/cpu-lab.yaml").read_text())
    data["cache"]["swap_space"] = 4
    profile = parse_profile(data, "x")
    assert "--swap-space" in render(profile, "0.17.0").argv
    with pytest.raises(ProfileError) as err:
        render(profile)
    (problem,) = err.value.problems
    assert problem.field == "cache.swap_space"
    assert "vLLM 0.32.0 has no --swap-space: removed in 0.18.0" in problem.message


def test_a_section_field_in_extra_args_is_refused_naming_its_section() -> None:
    data = yaml.safe_load((ROOT / "vllm_fleet/catalog/profiles/cpu-lab.yaml").read_text())
    data["extra_args"] = {"max_num_seqs": 4}
    with pytest.raises(ProfileError, match=r"extra_args\.max_num_seqs: set it in the profile as scheduler"):
        render(parse_profile(data, "x"))


def test_copy_with_a_field_the_model_lacks_is_refused() -> None:
    lab = load_profile("cpu-lab")
    with pytest.raises(ValueError, match="no field max_num_seqs"):
        lab.model_copy(update={"max_num_seqs": 4})
    smaller = lab.model_copy(update={"scheduler": lab.scheduler.model_copy(update={"max_num_seqs": 4})})
    assert render(smaller).config["max-num-seqs"] == 4


def test_stored_desired_state_from_before_the_sections_still_reads() -> None:
    """A stack's profile_data (audit, monitoring, the smoke gate) written by the flat model reads as the same
    profile, silently: it is state, not a file a person edits."""
    flat = yaml.safe_load((FLAT / "rtx4090-qwen2.5-7b-spec.yaml").read_text())
    stored = {**flat, "gpus": 1, "host": "0.0.0.0", "port": 8000, "extra_args": {}}  # as model_dump wrote it
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProfileLayoutWarning)
        assert DecodeProfile.model_validate(stored) == load_profile("rtx4090-qwen2.5-7b-spec")
