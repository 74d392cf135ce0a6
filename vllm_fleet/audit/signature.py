"""The evidence bundle's signature: OpenSSH's ``ssh-keygen -Y sign`` over the manifest, verified against the
auditor's allowed-signers file.

The manifest lists the sha256 of every other file of the bundle, so a signature over the manifest's bytes covers
the whole bundle: a file edited, added to the manifest or removed changes a hash or the manifest, and the
signature no longer holds. What it proves, and what it does not, is in docs/security.md ("Evidence bundles").
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

NAMESPACE = "vllm-fleet-audit"
"""ssh-keygen's signature namespace: a signature made for anything else (a git commit, a file) does not verify."""
SIGNATURE = "manifest.json.sig"
_TIMEOUT_S = 30


class SignatureError(ValueError):
    """A bundle that cannot be signed, or whose signature does not hold."""


@dataclass(frozen=True)
class Verdict:
    """What the re-judge can say of the bundle's origin, for the report."""

    signed: bool
    verified: bool
    signer: str | None
    detail: str

    def to_dict(self) -> dict[str, object]:
        return {"signed": self.signed, "verified": self.verified, "signer": self.signer, "detail": self.detail}


def _keygen(args: list[str], data: bytes, what: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            ["ssh-keygen", *args],
            input=data,
            capture_output=True,
            timeout=_TIMEOUT_S,
            check=False,
            env={"PATH": "/usr/bin:/bin:/usr/local/bin"},
        )
    except FileNotFoundError:
        raise SignatureError(f"{what}: ssh-keygen not found (install openssh-client)") from None
    except subprocess.TimeoutExpired:
        raise SignatureError(f"{what}: ssh-keygen did not answer within {_TIMEOUT_S} s") from None


def _first_line(proc: subprocess.CompletedProcess[bytes]) -> str:
    text = (proc.stderr or proc.stdout).decode("utf-8", "backslashreplace").strip()
    return text.splitlines()[0] if text else f"exit {proc.returncode}"


def sign(bundle: Path, key: Path) -> Path:
    """Sign ``bundle``'s manifest with the SSH private key ``key`` (no passphrase, or one the agent holds);
    the signature is written beside it as ``manifest.json.sig``."""
    from vllm_fleet.audit.evidence import MANIFEST

    manifest = bundle / MANIFEST
    if not key.is_file():
        raise SignatureError(f"--sign-key {key}: no such file; give an SSH private key (ssh-keygen -t ed25519)")
    proc = _keygen(["-Y", "sign", "-q", "-f", str(key), "-n", NAMESPACE], manifest.read_bytes(), f"sign {bundle}")
    if proc.returncode != 0 or not proc.stdout.startswith(b"-----BEGIN SSH SIGNATURE-----"):
        raise SignatureError(f"--sign-key {key}: cannot sign: {_first_line(proc)}")
    out = bundle / SIGNATURE
    out.write_bytes(proc.stdout)
    return out


def verify(manifest: bytes, signature: bytes | None, allowed_signers: Path | None) -> Verdict:
    """Whether ``signature`` over ``manifest`` was made, in this namespace, by a key of ``allowed_signers``
    (OpenSSH's allowed-signers format: ``principal [namespaces="vllm-fleet-audit"] ssh-ed25519 AAAA...``)."""
    if signature is None:
        return Verdict(False, False, None, f"unsigned: the bundle has no {SIGNATURE}")
    if allowed_signers is None:
        return Verdict(True, False, None, "signed, not verified: no --allowed-signers given")
    if not allowed_signers.is_file():
        raise SignatureError(f"--allowed-signers {allowed_signers}: no such file; give OpenSSH's allowed-signers file")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="vllm-fleet-sig-") as tmp:
        sig = Path(tmp) / SIGNATURE
        sig.write_bytes(signature)
        found = _keygen(["-Y", "find-principals", "-f", str(allowed_signers), "-s", str(sig)], b"", "verify")
        principals = found.stdout.decode("utf-8", "backslashreplace").split()
        if found.returncode != 0 or not principals:
            return Verdict(True, False, None, "signed by a key that is not in --allowed-signers")
        for principal in principals:
            check = _keygen(
                ["-Y", "verify", "-f", str(allowed_signers), "-I", principal, "-n", NAMESPACE, "-s", str(sig)],
                manifest,
                "verify",
            )
            if check.returncode == 0:
                return Verdict(True, True, principal, f"signature verified: {principal} ({NAMESPACE})")
        return Verdict(True, False, None, f"the signature does not hold: {_first_line(check)}")


def allowed_signers_line(principal: str, public_key: str) -> str:
    """One allowed-signers line trusting ``public_key`` (``ssh-ed25519 AAAA... comment``) for audit bundles only."""
    kind, blob = public_key.split()[:2]
    return f'{principal} namespaces="{NAMESPACE}" {kind} {blob}\n'


def signing_key(directory: Path, principal: str) -> tuple[Path, Path]:
    """An ed25519 signing key in ``directory`` (made once, 0600, no passphrase) and the allowed-signers file that
    trusts it for audit bundles: (private key, allowed signers)."""
    key = directory / "audit_signing_key"
    allowed = directory / "audit_allowed_signers"
    if not key.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        proc = _keygen(["-q", "-t", "ed25519", "-N", "", "-C", principal, "-f", str(key)], b"", "signing key")
        if proc.returncode != 0:
            raise SignatureError(f"{key}: cannot make a signing key: {_first_line(proc)}")
    if not allowed.is_file():
        public = Path(f"{key}.pub").read_text(encoding="utf-8")
        allowed.write_text(allowed_signers_line(principal, public), encoding="utf-8")
    return key, allowed
