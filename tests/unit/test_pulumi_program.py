"""The Pulumi program under `pulumi.runtime.set_mocks`: validation first, one GpuNode per host, batches."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime import rpc

from vllm_fleet.fleet.plan import ConvergeInput, FleetError
from vllm_fleet.fleet.spec import parse_fleet, plan_fleet, resolve_fleet
from vllm_fleet.project.paths import project_root
from vllm_fleet.pulumi.gpu_node import preflight_script, supported_platforms
from vllm_fleet.pulumi.names import RolloutPlan

# How the Pulumi SDK marks a secret value on the wire.
SECRET_SIG, SECRET_VALUE = rpc._special_sig_key, rpc._special_secret_sig


class Mocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(args)
        outputs = dict(args.inputs)
        if args.typ.startswith("command:"):  # as the provider: stdout is always a string
            outputs["stdout"] = f"{args.name} out\n"
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


def example_fleet() -> dict[str, Any]:
    stack = yaml.safe_load((project_root() / "Pulumi.example.yaml").read_text())
    fleet: dict[str, Any] = stack["config"]["vllm-fleet:fleet"]
    return fleet


SSH_KEY, API_KEY = "-----FAKE KEY FOR MOCKS-----", "k-123-api-key"


def run_program(fleet: dict[str, Any] | None, fleet_file: str | None = None) -> Mocks:
    mocks = Mocks()
    config = {"vllm-fleet:sshPrivateKey": SSH_KEY, "vllm-fleet:apiKey": API_KEY}
    if fleet is not None:
        config["vllm-fleet:fleet"] = json.dumps(fleet)
    if fleet_file is not None:
        config["vllm-fleet:fleetFile"] = fleet_file
    pulumi.runtime.set_mocks(mocks, project="vllm-fleet", stack="test", preview=False)
    pulumi.runtime.set_all_config(config, ["vllm-fleet:sshPrivateKey", "vllm-fleet:apiKey"])

    from vllm_fleet.pulumi.program import run

    @pulumi.runtime.test  # type: ignore[misc]
    def program() -> None:
        run()

    program()
    return mocks


def test_example_fleet_is_valid() -> None:
    nodes = resolve_fleet(parse_fleet(example_fleet()))
    assert [n.host.name for n in nodes] == ["gpu-4090-a", "gpu-4090-b", "gpu-l40-a"]
    assert nodes[0].profile.scheduler.max_num_seqs == 16  # the per-host override applied


def test_invalid_fleet_names_host_and_field() -> None:
    fleet = example_fleet()
    fleet["hosts"][2]["overrides"] = {"cache": {"gpu_memory_utilization": 0.99}}
    fleet["hosts"][1]["hardware"] = "l40"
    with pytest.raises(FleetError) as err:
        resolve_fleet(parse_fleet(fleet))
    text = str(err.value)
    assert "hosts[2](gpu-l40-a).profile.cache.gpu_memory_utilization" in text
    assert "hosts[1](gpu-4090-b).profile: rtx4090-qwen2.5-7b-awq-fp8kv is tuned for rtx4090" in text


def test_duplicate_hosts_and_unknown_keys() -> None:
    fleet = example_fleet()
    fleet["hosts"].append(dict(fleet["hosts"][0]))
    fleet["hostz"] = []
    with pytest.raises(FleetError) as err:
        parse_fleet(fleet)
    assert "share the name" in str(err.value) and "hostz" in str(err.value)


def test_program_registers_one_node_per_host() -> None:
    mocks = run_program(example_fleet())
    by_type: dict[str, list[str]] = {}
    for r in mocks.resources:
        by_type.setdefault(r.typ, []).append(r.name)
    assert sorted(by_type["vllm-fleet:index:GpuNode"]) == ["gpu-4090-a", "gpu-4090-b", "gpu-l40-a"]
    assert "command:remote:Command" not in by_type  # SSH is the system ssh's, host key pinned, from local commands
    commands = sorted(by_type["command:local:Command"])
    assert commands == sorted(
        ["api-key-version"]
        + [f"{h}-{c}" for h in ("gpu-4090-a", "gpu-4090-b", "gpu-l40-a") for c in ("preflight", "converge", "smoke")]
    )
    preflight = next(r for r in mocks.resources if r.name == "gpu-4090-a-preflight")
    assert preflight.inputs["create"].endswith("-m vllm_fleet.converge preflight") and "sh -s" not in preflight.inputs
    host = json.loads(preflight.inputs["environment"]["VLLM_FLEET_NODE"])["host"]
    assert host["host_key"].startswith("ssh-ed25519 ") and preflight.inputs["stdin"].startswith("set -eu")
    assert preflight.inputs["triggers"] == [host["address"], host["ssh_port"]]  # a new address: a new preflight
    converge = next(r for r in mocks.resources if r.name == "gpu-4090-a-converge")
    env = converge.inputs["environment"]
    assert SECRET_SIG not in env  # the node's spec is not a secret: it carries none (role_vars refuse them)
    node = json.loads(env["VLLM_FLEET_NODE"])
    assert node["vllm_config"]["max-num-seqs"] == 16
    # One typed input: what the converge reads back is the plan's node with the stack's role_vars, and its JSON
    # form is the environment's text byte for byte, keys in the order existing stacks' state holds them.
    plan = plan_fleet(example_fleet())
    expected = ConvergeInput.of(plan.nodes[0], plan.role_vars, system_digest=node["system_digest"])
    assert ConvergeInput.from_json(env["VLLM_FLEET_NODE"]) == expected
    assert expected.to_json() == env["VLLM_FLEET_NODE"]
    assert list(node) == [
        "system_digest", "host", "profile", "profile_data", "vllm_version", "vllm_config", "config_hash", "role_vars"
    ]  # fmt: skip
    assert "triggers" not in converge.inputs  # changes update in place; a replacement would run `remove`
    # The keys are the stack's, named only: the commands get the stack whose secrets the engine's run holds.
    smoke = next(r for r in mocks.resources if r.name == "gpu-4090-a-smoke")
    for r in (preflight, converge, smoke):
        assert r.inputs["environment"]["VLLM_FLEET_SECRETS"] == "vllm-fleet/test"
    # The gate gets what it reads (address, effective profile) and reruns with every converge (its digest).
    target = json.loads(smoke.inputs["environment"]["VLLM_FLEET_NODE"])
    assert target == {
        "host": {"name": "gpu-4090-a", "address": node["host"]["address"]},
        "profile_data": node["profile_data"],
    }
    assert smoke.inputs["environment"]["VLLM_FLEET_CONVERGE_DIGEST"] == env["VLLM_FLEET_CONVERGE_DIGEST"]


def test_secrets_are_held_once_per_stack_not_per_node() -> None:
    mocks = run_program(example_fleet())
    assert not [r for r in mocks.resources if r.typ.startswith("pulumi:providers:")]  # the default provider
    version = next(r for r in mocks.resources if r.name == "api-key-version")
    assert version.inputs["environment"] == {SECRET_SIG: SECRET_VALUE, "value": {"VLLM_FLEET_API_KEY": API_KEY}}
    holders = [r.name for r in mocks.resources if SSH_KEY in json.dumps(r.inputs) or API_KEY in json.dumps(r.inputs)]
    assert holders == ["api-key-version"]  # no node's resource holds a key
    for r in mocks.resources:
        if r.name.endswith(("-converge", "-smoke")):
            # Not the key: a token that changes with it, so a rotated key converges every node again.
            assert r.inputs["environment"]["VLLM_FLEET_API_KEY_VERSION"] == "api-key-version out"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, pulumi_garbage_collected: None) -> None:
    monkeypatch.setenv("VLLM_FLEET_CACHE", str(tmp_path / "cache"))
    # The example's hosts do not exist: none is serving (a test that needs some says which).
    monkeypatch.setattr("vllm_fleet.pulumi.program.serving_endpoints", lambda _e: set())


def _converge_env(mocks: Mocks) -> dict[str, Any]:
    return {r.name: r.inputs["environment"] for r in mocks.resources if r.name.endswith("-converge")}


def test_memoised_plan_registers_the_same_inputs(tmp_path: Any) -> None:
    """The second run takes the plan from the cache; the converge inputs must not move by a byte."""
    first = run_program(example_fleet())
    assert len(list((tmp_path / "cache" / "fleet-plans").glob("*.json"))) == 1
    second = run_program(example_fleet())
    assert _converge_env(first) == _converge_env(second)
    assert len(_converge_env(first)) == 3


def test_plan_cache_hits_misses_and_never_stores_errors(tmp_path: Any) -> None:
    from vllm_fleet.fleet.spec import plan_fleet
    from vllm_fleet.pulumi.plan_cache import cached_plan

    store = tmp_path / "plans"
    fleet = example_fleet()
    computed, hit = cached_plan(fleet, store)
    assert not hit and computed == plan_fleet(fleet)
    again, hit = cached_plan(fleet, store)
    assert hit and again == computed

    fleet["hosts"][0]["overrides"] = {"scheduler": {"max_num_seqs": 24}}
    changed, hit = cached_plan(fleet, store)
    assert not hit and changed.nodes[0].vllm_config["max-num-seqs"] == 24

    fleet["hosts"][0]["overrides"] = {"cache": {"gpu_memory_utilization": 1.5}}
    before = sorted(store.iterdir())
    for _ in range(2):
        with pytest.raises(FleetError, match=r"hosts\[0\]\(gpu-4090-a\)"):
            cached_plan(fleet, store)
    assert sorted(store.iterdir()) == before


def test_plan_cache_follows_profile_files_and_templates(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from vllm_fleet.pulumi import plan_cache

    profile = yaml.safe_load((project_root() / "vllm_fleet/catalog/profiles/cpu-lab.yaml").read_text())
    path = tmp_path / "mine.yaml"
    scheduler = profile["scheduler"]
    path.write_text(yaml.safe_dump({**profile, "scheduler": {**scheduler, "max_num_seqs": 4}}))
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKIExBffbfYBXsaT5fHdWreey1Q9IW3hwQMERWb9y5AZ"
    fleet = {
        "hosts": [{"name": "n1", "address": "10.0.0.1", "host_key": key, "hardware": "cpu-lab", "profile": str(path)}]
    }
    store = tmp_path / "plans"
    assert plan_cache.cached_plan(fleet, store)[0].nodes[0].vllm_config["max-num-seqs"] == 4
    # the same fleet config, an edited profile file
    path.write_text(yaml.safe_dump({**profile, "scheduler": {**scheduler, "max_num_seqs": 6}}))
    plan, hit = plan_cache.cached_plan(fleet, store)
    assert not hit and plan.nodes[0].vllm_config["max-num-seqs"] == 6

    templates = tmp_path / "templates"
    shutil.copytree(project_root() / "templates", templates)
    monkeypatch.setattr(plan_cache, "templates_dir", lambda: templates)
    key = plan_cache.plan_key(fleet)
    (templates / "vllm-config.yaml.j2").write_text((templates / "vllm-config.yaml.j2").read_text() + "\n")
    assert plan_cache.plan_key(fleet) != key


def test_rollout_plan_canary_share_and_waves() -> None:
    from vllm_fleet.fleet.spec import plan_fleet

    fleet = example_fleet()
    fleet["rollout"] = {"batch_size": "50%", "pause_s": 30, "provision_parallel": 2}
    plan = plan_fleet(fleet)
    names = [[n.name for n in b] for b in plan.batches()]
    assert names == [["gpu-4090-a"], ["gpu-4090-b", "gpu-l40-a"]]  # the canary alone, then 50% of 3 = 2
    assert [[n.name for n in w] for w in plan.provision_waves(plan.nodes)] == [
        ["gpu-4090-a", "gpu-4090-b"],
        ["gpu-l40-a"],
    ]
    no_canary = plan_fleet({**fleet, "rollout": {"batch_size": 2, "canary": False}})
    assert [len(b) for b in no_canary.batches()] == [2, 1]
    assert [len(b) for b in plan_fleet({**fleet, "rollout": {"batch_size": 1}}).batches()] == [1, 1, 1]
    for bad, words in (
        ({"batch_size": "0%"}, "batch_size"),
        ({"batch_size": 0}, "batch_size"),
        ({"pause_s": -1}, "pause_s"),
        ({"provision_parallel": 0}, "provision_parallel"),
    ):
        with pytest.raises(FleetError) as err:
            plan_fleet({**fleet, "rollout": bad})
        assert f"rollout.{words}" in str(err.value)


def test_serving_hosts_roll_in_batches_new_hosts_get_no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = example_fleet()
    fleet["rollout"] = {"batch_size": 1, "pause_s": 5}
    endpoints = {h["name"]: h["address"] for h in fleet["hosts"]}
    serving = {f"http://{endpoints['gpu-4090-a']}:8000", f"http://{endpoints['gpu-4090-b']}:8000"}
    monkeypatch.setattr("vllm_fleet.pulumi.program.serving_endpoints", lambda _e: serving)
    monkeypatch.setattr("vllm_fleet.pulumi.program.cordoned_nodes", lambda _s: {})
    mocks = run_program(fleet)
    pauses = [r for r in mocks.resources if r.name.startswith("rollout-pause-")]
    # Two serving hosts: one pause, between them; the new host (gpu-l40-a) waits for no pause.
    assert [p.name for p in pauses] == ["rollout-pause-0"]
    assert "time.sleep" in pauses[0].inputs["create"] and pauses[0].inputs["create"].endswith(" 5")
    node = json.loads(_converge_env(mocks)["gpu-4090-a-converge"]["VLLM_FLEET_NODE"])
    assert len(node["system_digest"]) == 64


def test_a_cordoned_serving_host_is_in_no_batch_and_keeps_its_last_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_fleet.pulumi import gpu_node

    fleet = example_fleet()
    fleet["rollout"] = {"batch_size": 1}
    endpoints = {h["name"]: f"http://{h['address']}:8000" for h in fleet["hosts"]}
    monkeypatch.setattr("vllm_fleet.pulumi.program.serving_endpoints", lambda _e: set(endpoints.values()))
    asked: list[dict[str, str]] = []

    def cordoned(sentinels: dict[str, str]) -> dict[str, str]:
        asked.append(sentinels)
        return {"gpu-4090-b": "GPU 0 Xid 79, ticket 4711"}

    monkeypatch.setattr("vllm_fleet.pulumi.program.cordoned_nodes", cordoned)
    held: dict[str, Any] = {}
    real = gpu_node.Command

    def spy(name: str, *args: Any, opts: pulumi.ResourceOptions | None = None, **kwargs: Any) -> Any:
        held[name] = opts.ignore_changes if opts else None
        return real(name, *args, opts=opts, **kwargs)

    monkeypatch.setattr(gpu_node, "Command", spy)
    notes: list[str] = []
    monkeypatch.setattr("pulumi.log.info", lambda msg, *a, **kw: notes.append(msg))
    warnings: list[str] = []
    monkeypatch.setattr("pulumi.log.warn", lambda msg, *a, **kw: warnings.append(msg))
    run_program(fleet)
    hosts = {h["name"]: h["address"] for h in fleet["hosts"]}
    assert asked == [{n: f"http://{a}:9180" for n, a in hosts.items()}]  # every serving host's sentinel
    assert held["gpu-4090-b-converge"] == held["gpu-4090-b-smoke"] == ["environment"]
    assert held["gpu-4090-a-converge"] is None and held["gpu-l40-a-converge"] is None
    plan = next(p for p in map(RolloutPlan.from_message, notes) if p is not None)
    assert plan.batches == [["gpu-4090-a"], ["gpu-l40-a"]] and plan.cordoned == {
        "gpu-4090-b": "GPU 0 Xid 79, ticket 4711"
    }
    assert any("gpu-4090-b is cordoned (GPU 0 Xid 79, ticket 4711): skipped" in w for w in warnings), warnings


def test_rollout_analysis_makes_the_canary_judge_itself_against_the_later_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fleet = example_fleet()
    endpoints = {h["name"]: f"http://{h['address']}:8000" for h in fleet["hosts"]}
    serving = {endpoints["gpu-4090-a"], endpoints["gpu-4090-b"]}
    monkeypatch.setattr("vllm_fleet.pulumi.program.serving_endpoints", lambda _e: serving)
    monkeypatch.setattr("vllm_fleet.pulumi.program.cordoned_nodes", lambda _s: {})

    def node_vars(fleet: dict[str, Any]) -> dict[str, dict[str, Any]]:
        env = _converge_env(run_program(fleet))
        return {k.removesuffix("-converge"): json.loads(v["VLLM_FLEET_NODE"]) for k, v in env.items()}

    plain = node_vars(fleet)
    fleet["rollout"] = {"analysis": {"window_s": 30, "max_ttft_increase": 0.25, "min_requests": 10}}
    judged = node_vars(fleet)
    canary = judged["gpu-4090-a"]["role_vars"]
    command = canary["vllm_service_canary_command"]
    assert command[1:5] == ["-m", "vllm_fleet.cli", "canary", "--vllm-version"]
    opts = dict(zip(command[6::2], command[7::2], strict=True))
    assert opts == {
        "--window": "30",
        "--max-ttft-increase": "0.25",
        "--max-itl-increase": "0.5",
        "--max-error-rate-increase": "0.02",
        "--min-requests": "10",
        "--alpha": "0.01",
        "--warmup": "30",
        "--windows": "2",
    }
    assert canary["vllm_service_canary_baseline"] == [endpoints["gpu-4090-b"]]  # the later batch, not the new host
    assert canary["vllm_service_canary_url"] == endpoints["gpu-4090-a"]
    for host in ("gpu-4090-b", "gpu-l40-a"):
        assert not any(k.startswith("vllm_service_canary") for k in judged[host]["role_vars"]), host
    # The canary's system digest is the same: the analysis only rolls the server, never the driver or vLLM.
    assert {h: v["system_digest"] for h, v in judged.items()} == {h: v["system_digest"] for h, v in plain.items()}
    with pytest.raises(FleetError) as err:
        plan_fleet({**fleet, "rollout": {"analysis": {"window_s": 1}}})
    assert "rollout.analysis.window_s" in str(err.value)
    with pytest.raises(FleetError) as err:
        plan_fleet({**fleet, "role_vars": {"vllm_service_canary_baseline": ["http://x:8000"]}})
    assert "rollout.analysis" in str(err.value)


def test_the_cordon_probe_reads_each_sentinels_state_as_data() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from vllm_fleet.pulumi.serving import cordoned_nodes

    answers = {
        "/a/state": (200, json.dumps({"state": "cordoned", "cordoned": True, "reason": "cordoned: ticket 4711"})),
        "/b/state": (200, json.dumps({"state": "ready", "cordoned": False, "reason": "ready"})),
        "/c/state": (200, json.dumps({"cordoned": True, "reason": "\x1b]0;owned\x07" + "x" * 500})),
        "/d/state": (200, "not json"),
        "/e/state": (503, json.dumps({"cordoned": True})),
        "/f/state": (200, json.dumps({"cordoned": "yes"})),
    }

    class Sentinel(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answers.get(self.path, (404, ""))
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *_a: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Sentinel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        found = cordoned_nodes({k: f"{base}/{k}" for k in "abcdef"} | {"g": "http://127.0.0.1:1"}, timeout_s=2)
    finally:
        server.shutdown()
    assert found.keys() == {"a", "c"}
    assert found["a"] == "ticket 4711"
    assert found["c"].startswith("?]0;owned?xxx") and len(found["c"]) == 200


def test_system_digest_ignores_the_profile_but_not_the_roles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("vllm_fleet.pulumi.program.serving_endpoints", lambda _e: set())

    def digests(fleet: dict[str, Any]) -> dict[str, str]:
        env = _converge_env(run_program(fleet))
        return {k: json.loads(v["VLLM_FLEET_NODE"])["system_digest"] for k, v in env.items()}

    base = digests(example_fleet())
    tuned = example_fleet()
    tuned["hosts"][0]["overrides"] = {"scheduler": {"max_num_seqs": 8}}
    assert digests(tuned) == base  # a profile change only rolls the server
    mirrored = example_fleet()
    mirrored["role_vars"] = {**mirrored.get("role_vars", {}), "vllm_pip_index_url": "http://mirror.example/simple"}
    changed = digests(mirrored)
    assert all(changed[k] != base[k] for k in base)  # an input of the install converges everything again


def test_serving_probe_asks_health_and_counts_silence_as_new() -> None:
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from vllm_fleet.pulumi.serving import serving_endpoints

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *_a: Any) -> None:
            pass

    up = HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    try:
        live = f"http://127.0.0.1:{up.server_port}"
        dead = f"http://127.0.0.1:{closed}"
        assert serving_endpoints([live, dead], timeout_s=1) == {live}
    finally:
        up.shutdown()


def test_a_fleet_file_registers_what_the_inline_fleet_does(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`vllm-fleet:fleetFile` (relative to the project, the program's working directory) instead of an inline fleet:
    the same nodes with the same inputs; its problems fail the run naming the file and the field."""
    inline = _converge_env(run_program(example_fleet()))
    project = tmp_path / "project"
    (project / "fleets").mkdir(parents=True)
    (project / "fleets" / "a.yaml").write_text(yaml.safe_dump(example_fleet()))
    monkeypatch.chdir(project)
    named = _converge_env(run_program(None, "fleets/a.yaml"))
    assert named == inline and len(named) == 3
    bad = example_fleet()
    bad["hosts"][0]["address"] = "-oProxyCommand=id"
    (project / "fleets" / "a.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(pulumi.RunError, match=r"fleets/a\.yaml: hosts\[0\]\(gpu-4090-a\)\.address: not an IP"):
        run_program(None, "fleets/a.yaml")


@pytest.mark.parametrize(
    ("os_id", "version", "ok"), [("debian", "12", True), ("ubuntu", "24.04", True), ("centos", "9", False)]
)
def test_the_preflight_script_takes_the_platforms_the_roles_take(os_id: str, version: str, ok: bool) -> None:
    """The preflight's OS check is made from the os_vars role's list (one source): run with a host's os-release."""
    platforms = supported_platforms()
    assert f"{os_id.capitalize()}-{version}" in platforms or not ok
    script = preflight_script(platforms).replace(". /etc/os-release", f"ID={os_id} VERSION_ID={version}")
    proc = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, check=False)
    assert proc.stdout.startswith(f"os={os_id}-{version}\n")
    assert (proc.returncode == 0) is ok, proc.stderr
    if not ok:
        assert "vllm-fleet supports Debian 12, Ubuntu 22.04 and 24.04" in proc.stderr
    assert "vllm-fleet supports Debian 12 and 13, Ubuntu 24.04" in preflight_script(
        ["Debian-12", "Debian-13", "Ubuntu-24.04"]
    )
