"""The Go command provider's own tests (tools/pulumi_engine/cmd/pulumi-resource-vllm-fleet-command/*_test.go):
address/user/host-key validation, `--` before the destination, the key served by an in-process agent (never a
file), a pinned host key against a real sshd-less SSH server (main_test.go); replace/update/delete semantics on
the provider's gRPC methods (lifecycle_test.go). Run with `go test` in the engine's build module."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from vllm_fleet.project.paths import cache_dir

pytestmark = pytest.mark.e2e


def test_command_provider_go_tests() -> None:
    from vllm_fleet.deploy.engine import ensure_engine

    engine = ensure_engine()  # builds (once) the module the provider is compiled in: <cache>/pulumi/<v>/src
    src = engine.bin_dir.parent / "src"
    for test_file in ("main_test.go", "lifecycle_test.go"):
        assert (src / "cmd" / "pulumi-resource-vllm-fleet-command" / test_file).is_file()
    go = shutil.which("go") or "/usr/local/go/bin/go"
    env = {
        **os.environ,
        "GOMODCACHE": str(cache_dir() / "go" / "mod"),
        "GOCACHE": str(cache_dir() / "go" / "build"),
        "GOFLAGS": "-mod=mod -buildvcs=false",
        "GOPROXY": os.environ.get("GOPROXY", "off"),
    }
    proc = subprocess.run(
        [go, "test", "-count=1", "./cmd/pulumi-resource-vllm-fleet-command/"],
        cwd=src, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert Path(src, "go.mod").is_file() and "ok" in proc.stdout
