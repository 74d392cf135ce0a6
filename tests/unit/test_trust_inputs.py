"""The trust boundary at the schema: hostile values in profiles, stack configs and inventories are refused with
the field named (or rendered inert), and every parser is bounded — before any host is touched."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_fleet.catalog._data import read_yaml
from vllm_fleet.fleet.plan import FleetError
from vllm_fleet.fleet.spec import plan_fleet
from vllm_fleet.profiles.loader import ProfileError, parse_profile, read_profile_file
from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.render import config_yaml, render
from vllm_fleet.trust.user_yaml import MAX_BYTES, InputFileError, parse_user_yaml

ROOT = Path(__file__).resolve().parents[2]
JINJA = "{{ lookup('pipe','id -un') }}-X"
HOSTILE_STRINGS = [
    JINJA,
    "{% raw %}x{% endraw %}",
    "-oProxyCommand=touch /tmp/pwned",
    "a\nExecStartPre=+/bin/sh -c id",
    "x; rm -rf /",
    "$(id)",
]


def example_fleet() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "Pulumi.example.yaml").read_text())
    return dict(data["config"]["vllm-fleet:fleet"])


def fleet_problems(fleet: dict[str, Any]) -> list[str]:
    try:
        plan_fleet(fleet)
    except FleetError as err:
        return [str(p) for p in err.problems]
    return []


def _string_fields(model: type[Any], prefix: str = "") -> list[str]:
    """Dotted names of every string-valued field of a profile (nested sections included)."""
    out = []
    for name, field in model.model_fields.items():
        ann = str(field.annotation)
        kinds = getattr(field.annotation, "__args__", (field.annotation,))
        nested = next((a for a in kinds if hasattr(a, "model_fields")), None)
        if nested is not None:
            out += _string_fields(nested, f"{prefix}{name}.")
        elif "str" in ann and "dict" not in ann and "Literal" not in ann:
            out.append(prefix + name)
    return out


PROFILE_STRINGS = _string_fields(DecodeProfile)


def test_the_sweep_covers_every_string_field() -> None:
    assert {
        "name",
        "description",
        "hardware",
        "vllm_version",
        "model.model",
        "model.path",
        "model.served_model_name",
        "frontend.host",
    } <= set(PROFILE_STRINGS)
    assert "speculative.model" in PROFILE_STRINGS


@pytest.mark.parametrize("payload", HOSTILE_STRINGS)
@pytest.mark.parametrize("field", PROFILE_STRINGS)
def test_hostile_string_in_any_profile_field_is_refused_or_inert(field: str, payload: str) -> None:
    data = copy.deepcopy(read_yaml("profiles/rtx4090-qwen2.5-7b-spec.yaml"))
    section, _, leaf = field.rpartition(".")
    (data.setdefault(section, {}) if section else data)[leaf] = payload
    try:
        profile = parse_profile(data, "hostile")
    except ProfileError as err:
        assert any(p.field == field for p in err.problems), err.problems
        return
    # Accepted (free text: the description): it must not reach the config, and nothing evaluates it.
    assert field == "description" and "\n" not in payload
    text = config_yaml(profile, render(profile))
    assert payload not in text and "root-X" not in text


def test_extra_args_strings_reach_the_config_inert() -> None:
    """extra_args values are free (a chat template is Jinja by nature): rendered as JSON strings, never evaluated."""
    data = copy.deepcopy(read_yaml("profiles/cpu-lab.yaml"))
    value = JINJA + "\nline two"
    data["extra_args"] = {"chat_template": value}
    profile = parse_profile(data, "x")
    text = config_yaml(profile, render(profile))
    assert yaml.safe_load(text)["chat-template"] == value  # exactly the data, one YAML entry
    assert "root-X" not in text and "line two" not in text.replace("\\nline two", "")


@pytest.mark.parametrize(
    ("key", "value"),
    [("extra_args", {"bad key\nx": 1}), ("extra_args", {"api_key": "sk-live-0123456789"})],
)
def test_extra_args_keys_are_argument_names_and_never_the_api_key(key: str, value: Any) -> None:
    data = {**read_yaml("profiles/cpu-lab.yaml"), key: value}
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "x")
    text = str(err.value)
    assert "extra_args" in text
    assert "sk-live-0123456789" not in text


def test_an_inline_api_key_is_refused_and_never_echoed() -> None:
    data = {**read_yaml("profiles/cpu-lab.yaml"), "api_key": "sk-live-0123456789abcdef"}
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "x")
    assert "api_key: not a profile field" in str(err.value)
    assert "pulumi config set --secret apiKey" in str(err.value)
    assert "sk-live" not in str(err.value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0.0.0.0:8000", "the port goes in its own field"),
        ("10.0.0.256", "not a valid IPv4 address"),
        ("-oProxyCommand=x", "not an IP address or DNS name"),
    ],
)
def test_listen_host(value: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_profile({**read_yaml("profiles/cpu-lab.yaml"), "frontend": {"host": value}}, "x")


# -- stack config ------------------------------------------------------------------------------------------------
HOST_STRINGS = ["name", "address", "ssh_user", "host_key", "hardware", "profile"]


@pytest.mark.parametrize("payload", HOSTILE_STRINGS)
@pytest.mark.parametrize("field", HOST_STRINGS)
def test_hostile_string_in_any_host_field_is_refused_with_the_field(field: str, payload: str) -> None:
    fleet = example_fleet()
    fleet["hosts"][1][field] = payload
    problems = fleet_problems(fleet)
    assert any(p.startswith("hosts[1]") and f".{field}" in p.split(":")[0] for p in problems), problems


@pytest.mark.parametrize("payload", HOSTILE_STRINGS)
@pytest.mark.parametrize("field", ["model.served_model_name", "model.model", "model.path", "frontend.host"])
def test_hostile_override_is_refused_with_the_host_and_field(field: str, payload: str) -> None:
    fleet = example_fleet()
    section, leaf = field.split(".")
    fleet["hosts"][0]["overrides"] = {section: {leaf: payload}}
    problems = fleet_problems(fleet)
    assert any(p.startswith(f"hosts[0](gpu-4090-a).overrides.{field}:") for p in problems), problems


@pytest.mark.parametrize("payload", HOSTILE_STRINGS)
def test_role_var_templates_and_line_breaks_are_refused_the_rest_is_plain_data(payload: str) -> None:
    fleet = example_fleet()
    fleet["role_vars"]["vllm_pip_index_url"] = payload
    fleet["role_vars"]["vllm_service_environment"] = {"VLLM_NOTE": payload}
    problems = fleet_problems(fleet)
    if "{{" in payload or "{%" in payload:
        assert any(p.startswith("role_vars.vllm_pip_index_url: is a Jinja template") for p in problems), problems
        assert any(p.startswith("role_vars.vllm_service_environment.VLLM_NOTE: is a Jinja") for p in problems)
    elif "\n" in payload:
        assert any(p.startswith("role_vars.vllm_service_environment.VLLM_NOTE") for p in problems), problems
    else:  # `$(id)`, `;`, a leading dash: data to Ansible and to systemd's quoted Environment=, never a shell
        assert problems == []


@pytest.mark.parametrize(
    "url",
    [
        "https://deploy:s3cret-pw@mirror.example.internal/simple/",
        "http://tok3n-abc@mirror.example/x",
        " https://u:p@m/",
    ],
)
def test_credentials_in_a_role_var_url_are_refused_and_never_echoed(url: str) -> None:
    """role_vars are not secret (plain in the stack file and the nodes' inputs): a URL with credentials is refused,
    named by its field, before any host; nested values too."""
    fleet = example_fleet()
    fleet["role_vars"]["vllm_pip_index_url"] = url
    fleet["role_vars"]["vllm_service_environment"] = {"PIP_EXTRA_INDEX_URL": url}
    problems = fleet_problems(fleet)
    for field in ("role_vars.vllm_pip_index_url", "role_vars.vllm_service_environment.PIP_EXTRA_INDEX_URL"):
        assert any(p.startswith(f"{field}: carries credentials in the URL") for p in problems), problems
    assert not any(secret in " ".join(problems) for secret in ("s3cret", "tok3n", "u:p@"))
    fleet["role_vars"]["vllm_pip_index_url"] = "https://mirror.example.internal/simple/@latest"  # an @ in the path
    fleet["role_vars"]["vllm_service_environment"] = {}
    assert fleet_problems(fleet) == []


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("address", "10.20.0.11:2222", "ssh_port: 2222"),
        ("address", "300.1.2.3", "not a valid IPv4 address"),
        ("address", "root@10.0.0.1", "not an IP address or DNS name"),
        ("ssh_user", "-oProxyCommand=x", "not a POSIX user name"),
        ("ssh_user", "Root User", "not a POSIX user name"),
        (
            "host_key",
            "10.20.0.11 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKIExBffbfYBXsaT5fHdWreey1Q9IW3hwQMERWb9y5AZ",
            "starts with a host name",
        ),
        ("host_key", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKIExBffbfYB", "copy it again"),
        ("host_key", "ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAABAQ==", "not an ssh-ed25519 key"),
    ],
)
def test_connection_fields(field: str, value: str, message: str) -> None:
    fleet = example_fleet()
    fleet["hosts"][0][field] = value
    problems = fleet_problems(fleet)
    assert any(p.startswith(f"hosts[0](gpu-4090-a).{field}:") and message in p for p in problems), problems


def test_host_key_is_required_with_the_fix() -> None:
    fleet = example_fleet()
    del fleet["hosts"][2]["host_key"]
    assert fleet_problems(fleet) == [
        "hosts[2](gpu-l40-a).host_key: required: pin the host's SSH key, the last two fields of "
        "`ssh-keyscan -t ed25519 <address>`"
    ]


def test_unknown_profile_is_worded_as_a_fleet_error() -> None:
    fleet = example_fleet()
    fleet["hosts"][0]["profile"] = "no-such-profile"
    problems = fleet_problems(fleet)
    assert len(problems) == 1 and problems[0].startswith("hosts[0](gpu-4090-a).profile: no built-in profile")
    assert "--profile" not in problems[0]


def test_unknown_model_and_hardware_are_fleet_errors_not_tracebacks(tmp_path: Path) -> None:
    fleet = example_fleet()
    fleet["hosts"][0]["overrides"] = {"model": {"model": "acme/not-in-the-catalog"}}
    fleet["hosts"][1]["hardware"] = "rtx9090"
    problems = fleet_problems(fleet)
    assert any(
        p.startswith("hosts[0](gpu-4090-a).profile.model.model: unknown model 'acme/not-in-the-catalog'")
        for p in problems
    )
    assert any(p.startswith("hosts[1](gpu-4090-b).hardware: unknown hardware 'rtx9090'") for p in problems)


def test_duplicate_hosts_name_the_indices_without_dumping_hosts() -> None:
    fleet = example_fleet()
    fleet["hosts"].append(dict(fleet["hosts"][0]))
    problems = fleet_problems(fleet)
    assert len(problems) == 1, problems
    assert "hosts[0] and hosts[3] share the name 'gpu-4090-a'" in problems[0]
    assert "host_key" not in problems[0] and "AAAA" not in problems[0]


def test_partial_speculative_override_keeps_method_and_drafter() -> None:
    fleet = example_fleet()
    fleet["hosts"][0]["overrides"] = {"scheduler": {"max_num_seqs": 16}, "speculative": {"num_speculative_tokens": 3}}
    node = plan_fleet(fleet).nodes[0]
    spec = json.loads(node.vllm_config["speculative-config"])
    assert spec["method"] == "draft_model" and spec["model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert spec["num_speculative_tokens"] == 3


def test_drafter_of_another_vocabulary_is_refused_unless_told() -> None:
    fleet = example_fleet()
    fleet["hosts"][0]["overrides"] = {
        "scheduler": {"max_num_seqs": 16},
        "speculative": {"use_heterogeneous_vocab": None},
    }
    problems = fleet_problems(fleet)
    assert any(
        p.startswith("hosts[0](gpu-4090-a).profile.speculative.model:") and "151936" in p and "152064" in p
        for p in problems
    ), problems


# -- parsers -----------------------------------------------------------------------------------------------------
def test_duplicate_keys_are_refused() -> None:
    with pytest.raises(InputFileError, match="duplicate key 'max_num_seqs'"):
        parse_user_yaml("max_num_seqs: 8\nmax_num_seqs: 64\n", "p.yaml")


def test_alias_bomb_is_refused_quickly() -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    with pytest.raises(InputFileError, match="alias bomb"):
        parse_user_yaml("\n".join(lines) + "\n", "bomb.yaml")
    # Anchors used sensibly still work.
    assert parse_user_yaml("base: &b {x: 1}\nother: *b\n", "ok.yaml") == {"base": {"x": 1}, "other": {"x": 1}}


def test_oversized_and_non_utf8_files_are_one_line_errors(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("x: " + "a" * (MAX_BYTES + 1))
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    for path, message in ((big, "larger than"), (latin, "not UTF-8")):
        with pytest.raises(ProfileError) as err:
            read_profile_file(path)
        assert message in str(err.value) and len(str(err.value).splitlines()) == 1


def test_truncated_model_config_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_')
    data = dict(read_yaml("profiles/cpu-lab.yaml"))
    data["model"] = {**data["model"], "model": str(model)}
    del data["model"]["path"]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_fleet.cli", "validate", str(path)], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "config.json is not valid JSON" in proc.stdout


def test_migrate_refuses_unknown_hardware() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_fleet.cli", "migrate", "vllm serve Qwen/Qwen2.5-7B-Instruct",
         "--vllm-version", "0.32.0", "--hardware", "rtx9090"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 1 and "--hardware 'rtx9090': not in the hardware catalog" in proc.stderr
