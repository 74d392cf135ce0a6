"""The lab mirror's Ubuntu trees (cuda/repos/ubuntu2204/x86_64/, ubuntu2404/x86_64/): their own repositories with
Ubuntu's package names and revisions, and apt resolves exactly what the nvidia_driver and cuda_toolkit roles
install on Ubuntu (roles/nvidia_driver/vars/Ubuntu.yml). Only the apt side is built (no wheelhouse, no root, no
server: apt reads the trees through file:), so this runs wherever dpkg-deb, apt-ftparchive, gpg and apt-get do."""

from __future__ import annotations

import fnmatch
import shutil
from collections.abc import Callable
from pathlib import Path

import jinja2
import pytest
import yaml

from tests.mirror.test_mirror import Apt, _installs
from vllm_fleet.mirror.apt_repo import AptRepo, build_apt_repo, repo_path, sources_line, verify_with_gpgv
from vllm_fleet.mirror.standin import UBUNTU_DEFINITIONS, load_definitions
from vllm_fleet.project.paths import project_root

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("dpkg-deb", "apt-ftparchive", "gpg", "gpgv", "apt-get")),
    reason="needs dpkg-deb, apt-ftparchive, gpg, gpgv and apt-get (Debian/Ubuntu)",
)
DRIVER, CUDA = "580.82.07", "13.0.2"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> AptRepo:
    base = tmp_path_factory.mktemp("apt-side")
    return build_apt_repo(base / "root", load_definitions(), base / "gnupg", load_definitions(name=UBUNTU_DEFINITIONS))


def _ubuntu_role_packages(flavour: str) -> list[str]:
    """What the nvidia_driver role installs on Ubuntu for the 580 branch, from its own vars file."""
    raw = yaml.safe_load((project_root() / "roles/nvidia_driver/vars/Ubuntu.yml").read_text())
    render = lambda s: jinja2.Template(s).render(_nvidia_driver_suffix="-580")  # noqa: E731
    return [render(n) for n in raw["_nvidia_driver_os_kernel_module_packages"][flavour]] + [
        render(n) for n in raw["_nvidia_driver_os_userspace_packages"]
    ]


@pytest.fixture
def apt_on(repo: AptRepo, tmp_path: Path) -> Callable[[str], Apt]:
    """apt confined to tmp_path, reading one of the mirror's trees through file: (updated)."""

    def make(distro: str) -> Apt:
        base = tmp_path / "apt"
        for d in ("sources.list.d", "preferences.d", "trusted.gpg.d", "state/lists/partial", "cache/archives/partial"):
            (base / d).mkdir(parents=True, exist_ok=True)
        (base / "status").write_text("")
        shutil.copyfile(repo.keyring, base / "keyring.gpg")
        line = sources_line(f"file://{repo.root}", distro, keyring=str(base / "keyring.gpg"))
        (base / "sources.list").write_text(line + "\n")
        apt = Apt(base)
        proc = apt("apt-get", "update")
        assert proc.returncode == 0 and "W:" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        return apt

    return make


@pytest.mark.parametrize("distro", ["ubuntu2204", "ubuntu2404"])
def test_ubuntu_trees_are_their_own_signed_repositories(repo: AptRepo, distro: str) -> None:
    tree = repo.root / repo_path(distro)
    assert tree.is_dir() and not Path(str(tree).rstrip("/")).is_symlink()
    verify_with_gpgv(tree, repo.keyring)
    packages = (tree / "Packages").read_text()
    assert "Package: nvidia-dkms-580-open\n" in packages and "Version: 580.82.07-0ubuntu1\n" in packages
    assert "Package: nvidia-kernel-open-dkms\n" not in packages  # the Debian names stay in debian12/


@pytest.mark.parametrize("distro", ["ubuntu2204", "ubuntu2404"])
@pytest.mark.parametrize("flavour", ["open", "proprietary"])
def test_apt_resolves_what_the_roles_install_on_ubuntu(distro: str, flavour: str, apt_on: Callable[[str], Apt]) -> None:
    apt = apt_on(distro)
    names = _ubuntu_role_packages(flavour)
    version = f"{DRIVER}-0ubuntu1"
    assert fnmatch.fnmatch(version, f"{DRIVER}-*")  # the role's default pin, "<version>-*"
    toolkit = "cuda-toolkit-13-0"  # the cuda_toolkit role's name for 13.0.2
    installs = _installs(apt("apt-get", "-s", "install", *(f"{n}={version}" for n in names), f"{toolkit}={CUDA}-1"))
    assert {n: installs.get(n) for n in names} == dict.fromkeys(names, version), installs
    assert installs[toolkit] == f"{CUDA}-1" and "cuda-nvcc-13-0" in installs


def test_the_two_ubuntu_flavours_conflict(apt_on: Callable[[str], Apt]) -> None:
    apt = apt_on("ubuntu2404")
    proc = apt("apt-get", "-s", "install", "nvidia-dkms-580-open", "nvidia-dkms-580")
    assert proc.returncode != 0 and "conflict" in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr
