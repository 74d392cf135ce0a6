"""Kernel upgrades on a DKMS driver host: which headers meta-package keeps every new kernel buildable, what
`dkms status` says about the driver's module, and what the next kernel upgrade will do."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# A versioned kernel package (linux-image-6.1.0-26-amd64, linux-image-unsigned-6.8.0-45-generic) carries the
# kernel's release; a meta-package (linux-image-amd64, linux-image-generic-hwe-22.04) does not.
_VERSIONED = re.compile(r"\d+\.\d+\.\d+-")
# Debian "6.1.0-26-amd64" -> "amd64", "6.1.0-26-cloud-amd64" -> "cloud-amd64"; Ubuntu "6.8.0-45-generic" ->
# "generic", "5.15.0-1063-nvidia" -> "nvidia"; Debian backports "6.12.12+bpo-amd64" -> "amd64". A release without
# the distribution's ABI number (a custom kernel) has no flavour.
_RELEASE = re.compile(r"^\d+\.\d+(?:\.\d+)?(?:-\d+(?:\.\d+)*|\+bpo)(?:\+[^-]+)?-(?P<flavour>[a-z0-9][a-z0-9-]*)$")


def kernel_flavour(kernel_release: str) -> str | None:
    """The flavour part of a Debian/Ubuntu kernel release (``uname -r``), ``None`` for a custom kernel."""
    m = _RELEASE.match(kernel_release.strip())
    return m.group("flavour") if m else None


def headers_metapackages(kernel_release: str, installed: Iterable[str]) -> list[str]:
    """The headers meta-packages that follow the running kernel's flavour to every new kernel.

    Each installed kernel image meta-package of that flavour (Debian ``linux-image-amd64``, Ubuntu
    ``linux-image-generic`` or ``linux-image-generic-hwe-22.04``) names its headers twin (``linux-headers-…``);
    with none installed, ``linux-headers-<flavour>`` (the name both distributions use). ``[]`` for a kernel whose
    release has no distribution flavour (a custom kernel: its headers are the operator's business).
    """
    flavour = kernel_flavour(kernel_release)
    if flavour is None:
        return []
    metas = sorted(
        "linux-headers-" + suffix
        for name in installed
        if name.startswith("linux-image-")
        and not _VERSIONED.search(suffix := name.removeprefix("linux-image-"))
        and (suffix == flavour or suffix.startswith(flavour + "-"))
    )
    return metas or [f"linux-headers-{flavour}"]


def kernel_hold_packages(kernel_release: str, installed: Iterable[str]) -> list[str]:
    """What nvidia_driver_kernel_hold holds: the installed kernel meta-packages of the running flavour (image,
    headers and the ``linux-<flavour>…`` top meta Ubuntu has) and the running kernel's own image and headers."""
    flavour = kernel_flavour(kernel_release)
    names = set(installed)
    wanted = {f"linux-image-{kernel_release}", f"linux-headers-{kernel_release}"}
    if flavour is not None:
        for name in names:
            for prefix in ("linux-image-", "linux-headers-", "linux-"):
                suffix = name.removeprefix(prefix) if name.startswith(prefix) else None
                if (
                    suffix is not None
                    and not _VERSIONED.search(suffix)
                    and (suffix == flavour or suffix.startswith(flavour + "-"))
                ):
                    wanted.add(name)
    return sorted(wanted & names)


@dataclass(frozen=True)
class DkmsModule:
    module: str
    version: str
    kernel: str
    state: str


_DKMS_LINE = re.compile(
    r"^(?P<module>[^/,\s]+)[/,]\s*(?P<version>[^,\s]+),\s*(?P<kernel>[^,\s]+),\s*[^:]+:\s*(?P<state>.+?)\s*$"
)


def parse_dkms_status(text: str) -> list[DkmsModule]:
    """``dkms status`` lines (DKMS 3: ``nvidia/580.95.05, 6.1.0-26-amd64, x86_64: installed``; DKMS 2.8 writes
    ``nvidia, 580.95.05, …``); lines without a kernel (``added``) are left out."""
    found = []
    for line in text.splitlines():
        m = _DKMS_LINE.match(line.strip())
        if m:
            found.append(DkmsModule(m["module"], m["version"], m["kernel"], m["state"]))
    return found


def dkms_problem(status_text: str, driver_version: str, kernel_release: str) -> str:
    """'' when the driver's module is built and installed for ``kernel_release``; else what is wrong and the fix."""
    mine = [m for m in parse_dkms_status(status_text) if m.version == driver_version]
    here = [m for m in mine if m.kernel == kernel_release]
    log = f"/var/lib/dkms/<module>/{driver_version}/build/make.log"
    if not here:
        other = ", ".join(sorted({m.kernel for m in mine})) or "no kernel"
        return (
            f"DKMS has no NVIDIA {driver_version} module for kernel {kernel_release} (built for: {other}). Install "
            f"linux-headers-{kernel_release}, then `dkms autoinstall -k {kernel_release}` and read {log}."
        )
    bad = [m for m in here if not m.state.startswith("installed")]
    if bad:
        states = "; ".join(f"{m.module}: {m.state}" for m in bad)
        return (
            f"DKMS could not install the NVIDIA {driver_version} module for kernel {kernel_release} ({states}). "
            f"Read {log} (usually missing headers or a compiler mismatch), fix it, then "
            f"`dkms autoinstall -k {kernel_release}`."
        )
    return ""


def next_kernel_plan(install_headers: bool, kernel_hold: bool, flavour: str | None = None) -> str:
    """What the next kernel upgrade will do to the driver, in one sentence (preflight prints it)."""
    module = f"the {flavour} kernel module" if flavour else "the kernel module"
    if kernel_hold:
        return (
            "the kernel is held (nvidia_driver_kernel_hold): apt installs no new kernel until you `apt-mark unhold` "
            "the held kernel packages (or set the variable false) and converge again"
        )
    if not install_headers:
        return (
            "WARNING nvidia_driver_install_kernel_headers is false: a new kernel gets no headers, DKMS cannot build "
            f"{module} for it and the host boots without a GPU driver (fine only where the kernel is not this "
            "host's, e.g. a container)"
        )
    return (
        "a new kernel brings its headers (the distribution's headers meta-package is installed), DKMS builds "
        f"{module} for it when it is installed, and the next boot loads it; the converge checks `dkms status`"
    )
