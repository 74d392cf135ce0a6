"""What a host's converge is doing, from a real ansible-runner run to the live display's line."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from vllm_fleet.rollout.live import RolloutWatch
from vllm_fleet.rollout.phases import (
    PHASE_DIR_ENV,
    PhaseWriter,
    activity_of,
    converge_activities,
    read_activities,
    writer_from_env,
)
from vllm_fleet.rollout.progress import HostProgress, Progress, change_lines, render

# A playbook shaped like site.yml's last play: the role included with `apply`, its restart including the drain,
# the restart and the playbook's smoke hook from another directory, and a task file that keeps the activity.
_TASKS = {
    "roles/vllm/tasks/main.yml": "- name: Install step 0\n  ansible.builtin.debug: {msg: pip}\n",
    "roles/vllm_service/tasks/main.yml": (
        "- name: Render the decode profile\n  ansible.builtin.debug: {msg: config}\n"
        "- name: Restart\n  ansible.builtin.include_tasks: restart.yml\n"
    ),
    "roles/vllm_service/tasks/restart.yml": (
        "- name: Drain\n  ansible.builtin.include_tasks: drain.yml\n"
        "- name: Journal restarting\n  ansible.builtin.debug: {msg: j}\n"
        "- name: Health\n  ansible.builtin.include_tasks: health.yml\n"
        "- name: Smoke\n  ansible.builtin.include_tasks: '{{ playbook_dir }}/tasks/smoke.yml'\n"
    ),
    "roles/vllm_service/tasks/drain.yml": "- name: Wait until idle\n  ansible.builtin.debug: {msg: drain}\n",
    "roles/vllm_service/tasks/health.yml": "- name: Wait for health\n  ansible.builtin.debug: {msg: up}\n",
    "tasks/smoke.yml": "- name: Run vllm-fleet smoke\n  ansible.builtin.debug: {msg: smoke}\n",
}
_PLAY = """
- hosts: node-1
  gather_facts: false
  tasks:
    - {name: vLLM, ansible.builtin.include_role: {name: vllm, apply: {tags: [vllm]}}, tags: [vllm]}
    - {name: Server, ansible.builtin.include_role: {name: vllm_service, apply: {tags: [s]}}, tags: [s]}
"""


class Recording(PhaseWriter):
    def __init__(self, directory: Path, host: str) -> None:
        super().__init__(directory, host, clock=lambda: 1000.0)
        self.seen: list[str] = []

    def _write(self, record: dict[str, Any]) -> None:
        self.seen.append(record["activity"])
        super()._write(record)


def test_a_real_converge_run_names_its_activities_in_order(tmp_path: Path) -> None:
    import ansible_runner

    project = tmp_path / "project"
    for rel, text in _TASKS.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    (project / "site.yml").write_text(_PLAY)
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("node-1 ansible_connection=local\n")
    out = tmp_path / "activities"
    out.mkdir()
    (tmp_path / "private").mkdir()
    writer = Recording(out, "node-1")
    run = ansible_runner.run(
        private_data_dir=str(tmp_path / "private"),
        project_dir=str(project),
        playbook=str(project / "site.yml"),
        inventory=str(inventory),
        quiet=True,
        # ansible-playbook of this venv, as run_playbook finds it.
        envvars={"ANSIBLE_ROLES_PATH": str(project / "roles"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        event_handler=writer,
    )
    assert run.rc == 0, run.stdout.read()
    assert writer.seen == [
        "installing vLLM",
        "writing the config (checked by the installed vLLM)",
        "draining",
        "restarting, waiting for health",
        "smoke test",
    ]
    # The journal's task (in restart.yml) kept "draining" (no write for it); the file holds the last one.
    assert json.loads((out / "node-1.json").read_text()) == {"activity": "smoke test", "since": 1000.0}
    assert read_activities(out) == {"node-1": ("smoke test", 1000.0)}
    assert [p.name for p in out.iterdir()] == ["node-1.json"]  # no scratch file left beside it


@pytest.mark.parametrize(
    "event",
    [
        {"event": "runner_on_ok", "event_data": {"role": "vllm", "task_path": "/r/roles/vllm/tasks/main.yml:3"}},
        {"event": "runner_on_start", "event_data": {"role": "other", "task_path": "/x/drain.yml:1"}},
        {"event": "runner_on_start", "event_data": {"role": "vllm_service", "task_path": "/r/restart.yml:12"}},
        {"event": "runner_on_start", "event_data": {}},
        {"event": "runner_on_start"},
    ],
)
def test_other_events_keep_the_activity(event: dict[str, Any]) -> None:
    assert activity_of(event) is None


@pytest.mark.parametrize(
    ("task_path", "activity"),
    [
        ("/p/roles/vllm/tasks/wait.yml:7", "waiting for the vLLM install (background)"),
        ("/p/roles/vllm/tasks/install-finish.yml:3", "installing vLLM"),
        ("/p/roles/vllm/tasks/pip-step.yml:60", "installing vLLM"),
    ],
)
def test_the_wait_for_the_background_install_says_so(task_path: str, activity: str) -> None:
    """site.yml waits for the background pip inside the driver's reboot hook: the host is waiting, not installing."""
    event = {"event": "runner_on_start", "event_data": {"role": "vllm", "task_path": task_path}}
    assert activity_of(event) == activity


def test_a_host_name_that_is_not_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not an inventory host name"):
        PhaseWriter(tmp_path, "../etc/passwd")


def test_the_writer_exists_only_when_up_asked_for_one(tmp_path: Path) -> None:
    assert writer_from_env("node-1", {}) is None
    assert writer_from_env("node-1", {PHASE_DIR_ENV: str(tmp_path / "gone")}) is None
    writer = writer_from_env("node-1", {PHASE_DIR_ENV: str(tmp_path)})
    assert writer is not None and writer.path == tmp_path / "node-1.json"


def test_the_directory_is_named_for_the_run_then_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PHASE_DIR_ENV, "/before")
    with converge_activities() as directory:
        assert os.environ[PHASE_DIR_ENV] == str(directory) and directory.is_dir()
        assert directory.stat().st_mode & 0o077 == 0
    assert os.environ[PHASE_DIR_ENV] == "/before" and not directory.exists()


def _converging(progress: Progress, name: str, started: float) -> HostProgress:
    host = progress.hosts[name] = HostProgress(name, group="batch", index=0, phase="converging", started=started)
    return host


def test_only_a_converging_host_takes_an_activity_reported_since_its_step_began() -> None:
    p = Progress()
    a = _converging(p, "a", started=100.0)
    b = p.hosts["b"] = HostProgress("b", group="batch", index=1, phase="waiting")
    assert p.note_activities({"a": ("draining", 99.0), "b": ("draining", 120.0)}) == []  # stale / not converging
    assert p.note_activities({"a": ("draining", 110.0)}) == ["a"]
    assert p.note_activities({"a": ("draining", 110.0)}) == []  # no change, no line
    assert a.state == "converging › draining" and b.state == "waiting"
    table = render(p, 130.0)
    assert any(line.startswith("a ") and "converging › draining (20s)" in line for line in table)  # and for how long
    assert p.note_activities({"a": ("waiting for the vLLM install (background)", 115.0)}) == ["a"]
    assert a.state_at(245.0) == "converging › waiting for the vLLM install (background, 2m10s)"
    a.phase = "done"
    assert a.state == "done" and a.state_at(300.0) == "done"  # a finished host shows no stale activity


def test_the_watch_prints_each_new_activity_off_a_terminal(tmp_path: Path) -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=200)
    now = [200.0]
    watch = RolloutWatch(console, tmp_path / "up.log", clock=lambda: now[0], phase_dir=tmp_path, poll_s=3600)
    with watch:
        _converging(watch.progress, "node-1", started=150.0)
        watch.progress.started_at = 150.0
        PhaseWriter(tmp_path, "node-1", clock=lambda: 160.0)(
            {"event": "runner_on_start", "event_data": {"role": "vllm_service", "task_path": "/r/drain.yml:5"}}
        )
        watch.poll_phases()
        watch.poll_phases()
    lines = [line for line in buf.getvalue().splitlines() if "node-1" in line]
    # One line for the activity (the second poll found no change), then the run's end without it.
    assert lines[0] == "[50s] node-1 (batch 1/0): converging › draining", buf.getvalue()
    assert lines[1:] == ["[50s] node-1 (batch 1/0): interrupted after 50s (the run ended before this host finished)"]
    assert "›" not in change_lines(watch.progress, ["node-1"], 200.0)[0]


def test_the_canary_analysis_window_is_an_activity_of_its_own() -> None:
    """The canary serves beside the old hosts for the whole window: the live table says so, with how long."""
    event = {"event": "runner_on_start", "event_data": {"role": "vllm_service", "task_path": "/r/canary.yml:14"}}
    activity = activity_of(event)
    assert activity == "canary analysis: serving beside the hosts on the old config"
    p = Progress()
    p.hosts["a"] = HostProgress("a", phase="converging", started=100.0)
    assert p.note_activities({"a": (activity, 130.0)}) == ["a"]
    assert p.hosts["a"].state_at(153.0) == f"converging › {activity} (23s)"
