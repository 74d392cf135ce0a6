"""A flat apt repository laid out like NVIDIA's CUDA network repository, signed with a lab key.

Layout under the mirror root (``<url>`` is what the server serves, e.g. ``lab_mirror_url``)::

    cuda/repos/debian12/x86_64/       the repository: *.deb, Packages(.gz), Release,
                                      InRelease, Release.gpg, <KEYID>.pub (armored key, like
                                      NVIDIA's 3bf863cc.pub) and cuda-archive-keyring.gpg
    cuda/repos/ubuntu2204/x86_64/     the Ubuntu stand-ins (tools/standin_debs/packages.ubuntu.yaml: Ubuntu's
    cuda/repos/ubuntu2404/x86_64/     names and revisions), each a tree of its own like NVIDIA's; without Ubuntu
                                      definitions, symlinks to the Debian tree
    keys/vllm-fleet-lab.gpg           the public key as a binary keyring (for signed-by=)
    keys/vllm-fleet-lab.asc           the same, armored

A host uses it exactly like NVIDIA's repo (see :func:`sources_line`)::

    deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] <url>/cuda/repos/debian12/x86_64/ /

The signing key is generated once (``gpg --batch``, no passphrase) and kept in
``<cache>/mirror/gnupg``; rebuilding the repository re-signs with the same key, so hosts that
already trust it keep working.
"""

from __future__ import annotations

import contextlib
import gzip
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from vllm_fleet.mirror import MirrorError
from vllm_fleet.mirror._util import ensure_commands, fresh_dir, run
from vllm_fleet.mirror.standin import StandinSet, build_all

DISTROS: tuple[str, ...] = ("debian12", "ubuntu2204", "ubuntu2404")
PRIMARY_DISTRO = "debian12"
ARCH_DIR = "x86_64"
KEY_UID = "vllm-fleet lab mirror (stand-in repository, NOT NVIDIA) <lab-mirror@vllm-fleet.invalid>"
KEYRING_NAME = "vllm-fleet-lab.gpg"
# Where NVIDIA's cuda-keyring package puts its key; a role can put the lab key there too.
HOST_KEYRING_PATH = "/usr/share/keyrings/cuda-archive-keyring.gpg"
REPO_KEYRING_NAME = "cuda-archive-keyring.gpg"
RELEASE_FIELDS = {
    "Origin": "vllm-fleet lab",
    "Label": "vllm-fleet lab stand-in of NVIDIA CUDA",
    "Description": "vllm-fleet lab stand-in packages: NOT NVIDIA software",
}
# Commands this module needs, and the Debian package that brings each.
TOOLS = {"apt-ftparchive": "apt-utils", "gpg": "gnupg", "gpgconf": "gnupg", "dpkg-deb": "dpkg"}


def repo_path(distro: str = PRIMARY_DISTRO) -> str:
    """The repository's path below the mirror URL, with a trailing slash (NVIDIA's layout)."""
    return f"cuda/repos/{distro}/{ARCH_DIR}/"


def sources_line(base_url: str, distro: str = PRIMARY_DISTRO, keyring: str = HOST_KEYRING_PATH) -> str:
    """The one-line-style ``deb`` entry a host needs (pure)."""
    return f"deb [signed-by={keyring}] {base_url.rstrip('/')}/{repo_path(distro)} /"


@dataclass(frozen=True)
class AptRepo:
    root: Path  # the mirror root
    fingerprint: str
    packages: int

    @property
    def directory(self) -> Path:
        return self.root / repo_path(PRIMARY_DISTRO)

    @property
    def keyring(self) -> Path:
        return self.root / "keys" / KEYRING_NAME


# ---------------------------------------------------------------- the lab signing key


@contextlib.contextmanager
def gnupg(home: Path) -> Iterator[dict[str, str]]:
    """``GNUPGHOME=home`` for the block; the gpg-agent it may start is stopped afterwards."""
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)
    env = {"GNUPGHOME": str(home), "LC_ALL": "C"}
    try:
        yield env
    finally:
        run(["gpgconf", "--kill", "all"], env=env, check=False, timeout=30)


def _fingerprint(env: dict[str, str]) -> str | None:
    proc = run(["gpg", "--batch", "--with-colons", "--list-secret-keys", KEY_UID], env=env, check=False)
    for line in proc.stdout.decode().splitlines():
        if line.startswith("fpr:"):
            return line.split(":")[9]
    return None


def ensure_signing_key(home: Path) -> str:
    """The lab signing key's fingerprint, generating the key (once) if ``home`` has none."""
    ensure_commands(TOOLS)
    with gnupg(home) as env:
        fpr = _fingerprint(env)
        if fpr is None:
            print(f"mirror: generating the lab apt signing key in {home} (once)", flush=True)
            run(
                [
                    "gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "",
                    "--quick-generate-key", KEY_UID, "rsa3072", "sign", "never",
                ],
                env=env,
                timeout=300,
            )  # fmt: skip
            fpr = _fingerprint(env)
        if fpr is None:
            raise MirrorError(f"gpg did not create a key for {KEY_UID!r} in {home}")
        return fpr


def export_public_key(home: Path, fingerprint: str, *, armor: bool) -> bytes:
    with gnupg(home) as env:
        argv = ["gpg", "--batch", "--export", *(["--armor"] if armor else []), fingerprint]
        data = run(argv, env=env).stdout
    if not data:
        raise MirrorError(f"gpg exported nothing for {fingerprint}")
    return data


def sign_release(home: Path, fingerprint: str, repo_dir: Path) -> None:
    """Write ``InRelease`` (clearsigned) and ``Release.gpg`` (detached) next to ``Release``."""
    with gnupg(home) as env:
        base = ["gpg", "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", "", "--local-user"]
        release = repo_dir / "Release"
        run(
            [*base, fingerprint, "--digest-algo", "SHA256", "--clearsign", "-o", repo_dir / "InRelease", release],
            env=env,
        )
        run([*base, fingerprint, "--digest-algo", "SHA256", "-abs", "-o", repo_dir / "Release.gpg", release], env=env)


# ---------------------------------------------------------------- the index files


def _sorted_packages(text: str) -> str:
    """apt-ftparchive lists in directory order; sort the stanzas by (Package, Version) for stable output."""
    stanzas = [s.strip("\n") for s in text.split("\n\n") if s.strip()]

    def key(stanza: str) -> tuple[str, str]:
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line[0].isspace())
        return fields.get("Package", ""), fields.get("Version", "")

    return "".join(s + "\n\n" for s in sorted(stanzas, key=key))


def write_indexes(repo_dir: Path) -> None:
    """``Packages``, ``Packages.gz`` and ``Release`` (with MD5/SHA1/SHA256/SHA512) for a flat repo."""
    ensure_commands(TOOLS)
    packages = _sorted_packages(run(["apt-ftparchive", "packages", "."], cwd=repo_dir).stdout.decode())
    (repo_dir / "Packages").write_text(packages, encoding="utf-8")
    with (repo_dir / "Packages.gz").open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(packages.encode())
    opts = [f"-o=APT::FTPArchive::Release::{k}={v}" for k, v in RELEASE_FIELDS.items()]
    release = run(["apt-ftparchive", *opts, "release", "."], cwd=repo_dir).stdout
    (repo_dir / "Release").write_bytes(release)


def _build_tree(
    repo: Path, standins: StandinSet, gnupg_home: Path, fingerprint: str, keys: tuple[bytes, bytes]
) -> None:
    """One repository tree: the debs, the keys beside them (as NVIDIA's trees have), indexes, signatures."""
    build_all(standins, repo)
    binary_key, armored_key = keys
    (repo / REPO_KEYRING_NAME).write_bytes(binary_key)
    (repo / f"{fingerprint[-8:].lower()}.pub").write_bytes(armored_key)
    write_indexes(repo)
    sign_release(gnupg_home, fingerprint, repo)


def build_apt_repo(dest: Path, standins: StandinSet, gnupg_home: Path, ubuntu: StandinSet | None = None) -> AptRepo:
    """Build the whole apt side into ``dest`` (a fresh directory that becomes the mirror root's
    ``cuda/`` + ``keys/``): stand-in debs, indexes, signatures, the keys. ``ubuntu``: the Ubuntu stand-ins, built
    into their own ubuntu2204 and ubuntu2404 trees (without them, those paths link to the Debian tree)."""
    ensure_commands(TOOLS)
    fingerprint = ensure_signing_key(gnupg_home)
    fresh_dir(dest)
    repo = dest / repo_path(PRIMARY_DISTRO)
    binary_key = export_public_key(gnupg_home, fingerprint, armor=False)
    armored_key = export_public_key(gnupg_home, fingerprint, armor=True)
    _build_tree(repo, standins, gnupg_home, fingerprint, (binary_key, armored_key))
    keys = dest / "keys"
    keys.mkdir()
    (keys / KEYRING_NAME).write_bytes(binary_key)
    (keys / KEYRING_NAME.replace(".gpg", ".asc")).write_bytes(armored_key)
    for distro in DISTROS:
        if distro == PRIMARY_DISTRO:
            continue
        tree = dest / repo_path(distro)
        if ubuntu is not None:
            _build_tree(tree, ubuntu, gnupg_home, fingerprint, (binary_key, armored_key))
            continue
        tree.parent.mkdir(parents=True, exist_ok=True)
        tree.symlink_to(os.path.relpath(repo, tree.parent), target_is_directory=True)
    for p in [dest, *dest.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)
    return AptRepo(root=dest, fingerprint=fingerprint, packages=len(standins.packages))


def verify_with_gpgv(repo_dir: Path, keyring: Path) -> None:
    """Check ``InRelease`` and ``Release.gpg`` against ``keyring`` (what apt does on the host)."""
    ensure_commands({"gpgv": "gpgv"})
    run(["gpgv", "--keyring", keyring, repo_dir / "InRelease"])
    run(["gpgv", "--keyring", keyring, repo_dir / "Release.gpg", repo_dir / "Release"])
