"""vllm_fleet.gpu_host: the decisions about a real GPU host (flavour, kernel upgrades), fed facts as data."""

from __future__ import annotations

import base64

import pytest
import yaml

from vllm_fleet.gpu_host.cuda import cuda_home
from vllm_fleet.gpu_host.kernel_modules import architectures, choose_flavour, flavour_table
from vllm_fleet.gpu_host.kernel_upgrades import (
    dkms_problem,
    headers_metapackages,
    kernel_flavour,
    kernel_hold_packages,
    next_kernel_plan,
    parse_dkms_status,
)
from vllm_fleet.gpu_host.secure_boot import secure_boot_plan, secure_boot_state
from vllm_fleet.project.paths import project_root

# -- kernel-module flavour: NVIDIA's rule (driver installation guide, "Kernel Modules") ----------------------


@pytest.mark.parametrize(
    ("architecture", "version", "flavour"),
    [
        ("maxwell", "580.95.05", "proprietary"),
        ("pascal", "535.230.02", "proprietary"),
        ("volta", "580.95.05", "proprietary"),
        ("turing", "580.95.05", "open"),
        ("ampere", "570.172.08", "open"),
        ("ada", "560.35.03", "open"),  # the first open-by-default branch
        ("ada", "555.42.06", "proprietary"),  # before R560 NVIDIA's default was proprietary
        ("hopper", "535.230.02", "proprietary"),
        ("hopper", "580.95.05", "open"),
        ("blackwell", "575.57.08", "open"),
        ("blackwell", "590.44.01", "open"),
    ],
)
def test_auto_follows_nvidias_rule(architecture: str, version: str, flavour: str) -> None:
    choice = choose_flavour(architecture, "auto", version)
    assert (choice.flavour, choice.problem) == (flavour, "")
    assert choice.reason


def test_an_explicit_choice_wins_and_says_what_the_default_was() -> None:
    choice = choose_flavour("ampere", "proprietary", "580.95.05")
    assert choice.flavour == "proprietary" and not choice.problem
    assert "set explicitly (NVIDIA's default here: open;" in choice.reason
    assert choose_flavour("hopper", "open", "535.230.02").flavour == "open"


@pytest.mark.parametrize(
    ("architecture", "requested", "version", "fix"),
    [
        ("volta", "open", "580.95.05", "set nvidia_driver_kernel_modules: proprietary (or auto)"),
        ("pascal", "open", "535.230.02", "set nvidia_driver_kernel_modules: proprietary (or auto)"),
        ("blackwell", "proprietary", "580.95.05", "need the open kernel modules (use auto or open)"),
        ("volta", "auto", "590.44.01", "pin a 580 driver"),
        ("kepler", "auto", "580.95.05", "is not one of maxwell, pascal, volta"),
        ("ada", "closed", "580.95.05", "is not one of auto, open, proprietary"),
    ],
)
def test_what_cannot_work_is_refused_with_the_fix(architecture: str, requested: str, version: str, fix: str) -> None:
    choice = choose_flavour(architecture, requested, version)
    assert choice.flavour is None
    assert fix in choice.problem


def test_the_table_is_the_roles_choices() -> None:
    specs = yaml.safe_load((project_root() / "roles/nvidia_driver/meta/argument_specs.yml").read_text())
    arch = specs["argument_specs"]["main"]["options"]["nvidia_driver_gpu_architecture"]
    assert arch["choices"] == architectures()
    assert architectures()[0] == "maxwell" and architectures()[-1] == "blackwell"
    assert flavour_table().open_default_from_branch == 560


# -- kernel upgrades ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("release", "flavour"),
    [
        ("6.1.0-26-amd64", "amd64"),
        ("6.1.0-26-cloud-amd64", "cloud-amd64"),
        ("6.12.12+bpo-amd64", "amd64"),
        ("5.15.0-119-generic", "generic"),
        ("6.8.0-1015-nvidia", "nvidia"),
        ("6.5.0-custom", None),
        ("6.9.3", None),
    ],
)
def test_kernel_flavour(release: str, flavour: str | None) -> None:
    assert kernel_flavour(release) == flavour


def test_headers_metapackage_is_the_twin_of_the_image_metapackage() -> None:
    debian = ["linux-image-amd64", "linux-image-6.1.0-26-amd64", "linux-headers-6.1.0-26-common"]
    assert headers_metapackages("6.1.0-26-amd64", debian) == ["linux-headers-amd64"]
    hwe = ["linux-image-generic-hwe-22.04", "linux-image-6.8.0-45-generic", "linux-image-unsigned-6.8.0-45-generic"]
    assert headers_metapackages("6.8.0-45-generic", hwe) == ["linux-headers-generic-hwe-22.04"]
    assert headers_metapackages("6.8.0-45-generic", ["linux-image-generic"]) == ["linux-headers-generic"]
    # No image meta-package of that flavour installed: the name both distributions use.
    assert headers_metapackages("6.1.0-26-cloud-amd64", ["linux-image-amd64"]) == ["linux-headers-cloud-amd64"]
    assert headers_metapackages("6.5.0-custom", debian) == []


def test_kernel_hold_takes_the_running_kernel_and_its_metapackages() -> None:
    installed = [
        "linux-generic-hwe-24.04",
        "linux-image-generic-hwe-24.04",
        "linux-headers-generic-hwe-24.04",
        "linux-image-6.8.0-45-generic",
        "linux-headers-6.8.0-45-generic",
        "linux-image-6.8.0-40-generic",
        "linux-image-6.8.0-1015-nvidia",
        "linux-firmware",
    ]
    assert kernel_hold_packages("6.8.0-45-generic", installed) == [
        "linux-generic-hwe-24.04",
        "linux-headers-6.8.0-45-generic",
        "linux-headers-generic-hwe-24.04",
        "linux-image-6.8.0-45-generic",
        "linux-image-generic-hwe-24.04",
    ]


DKMS3 = """\
nvidia/580.95.05, 6.1.0-26-amd64, x86_64: installed
nvidia/580.95.05, 6.1.0-27-amd64, x86_64: built
nvidia/580.82.07: added
"""
DKMS28 = "nvidia, 580.95.05, 5.15.0-119-generic, x86_64: installed (WARNING! Diff between built and installed)\n"


def test_dkms_status_parses_dkms_2_and_3() -> None:
    mods = parse_dkms_status(DKMS3 + DKMS28)
    assert [(m.module, m.version, m.kernel, m.state.split()[0]) for m in mods] == [
        ("nvidia", "580.95.05", "6.1.0-26-amd64", "installed"),
        ("nvidia", "580.95.05", "6.1.0-27-amd64", "built"),
        ("nvidia", "580.95.05", "5.15.0-119-generic", "installed"),
    ]


def test_dkms_problem_names_the_kernel_and_the_fix() -> None:
    assert dkms_problem(DKMS3, "580.95.05", "6.1.0-26-amd64") == ""
    assert dkms_problem(DKMS28, "580.95.05", "5.15.0-119-generic") == ""
    # As a public Ubuntu 22.04 host log shows it (HWE kernel, Ubuntu archive driver).
    ubuntu = "nvidia/580.173.02, 6.8.0-136-generic, x86_64: installed\n"
    assert dkms_problem(ubuntu, "580.173.02", "6.8.0-136-generic") == ""
    built = dkms_problem(DKMS3, "580.95.05", "6.1.0-27-amd64")
    assert "kernel 6.1.0-27-amd64" in built and "built" in built and "make.log" in built
    missing = dkms_problem(DKMS3, "580.95.05", "6.1.0-28-amd64")
    assert "no NVIDIA 580.95.05 module for kernel 6.1.0-28-amd64" in missing
    assert "built for: 6.1.0-26-amd64, 6.1.0-27-amd64" in missing
    assert "linux-headers-6.1.0-28-amd64" in missing
    assert "no NVIDIA 580.82.07 module" in dkms_problem(DKMS3, "580.82.07", "6.1.0-26-amd64")
    assert "no kernel" in dkms_problem("", "580.95.05", "6.1.0-26-amd64")


def test_next_kernel_plan() -> None:
    assert "DKMS builds the open kernel module" in next_kernel_plan(True, False, "open")
    assert next_kernel_plan(False, False).startswith("WARNING")
    assert "apt-mark unhold" in next_kernel_plan(True, True)


# -- Secure Boot ---------------------------------------------------------------------------------------------


def _efivar(value: int) -> str:
    return base64.b64encode(bytes([6, 0, 0, 0, value])).decode()


@pytest.mark.parametrize(
    ("efi", "rc", "said", "efivar", "state"),
    [
        (False, None, "", None, "no-efi"),
        (True, 0, "SecureBoot enabled\n", None, "enabled"),
        (True, 0, "SecureBoot disabled\n", _efivar(1), "disabled"),  # mokutil's answer wins
        (True, 2, "", _efivar(1), "enabled"),  # no mokutil: the EFI variable
        (True, None, "", _efivar(0), "disabled"),
        (True, 1, "EFI variables are not supported on this system", None, "unknown"),
        (True, None, "", "not base64!", "unknown"),
        (True, None, "", base64.b64encode(b"\x06").decode(), "unknown"),
    ],
)
def test_secure_boot_state(efi: bool, rc: int | None, said: str, efivar: str | None, state: str) -> None:
    assert secure_boot_state(efi, rc, said, efivar) == state


KEY, CERT = "/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub"


def test_secure_boot_plan() -> None:
    assert secure_boot_plan("disabled", False, KEY, CERT).action == "none"
    assert secure_boot_plan("no-efi", True, KEY, CERT).action == "none"
    unknown = secure_boot_plan("unknown", False, KEY, CERT)
    assert unknown.action == "none" and "Key was rejected by service" in unknown.message
    stop = secure_boot_plan("enabled", False, KEY, CERT)
    assert stop.action == "stop" and "Nothing was installed" in stop.message
    assert f"mokutil --import {CERT}" in stop.message and "turn Secure Boot off" in stop.message
    no_key = secure_boot_plan("enabled", True, KEY, CERT, key_exists=False, cert_exists=True)
    assert no_key.action == "stop" and f"the MOK key {KEY} is missing" in no_key.message
    pending = secure_boot_plan("enabled", True, KEY, CERT, True, True, f"{CERT} is already in the enrollment request")
    assert pending.action == "stop" and "MokManager" in pending.message and "--import" not in pending.message
    not_enrolled = secure_boot_plan("enabled", True, KEY, CERT, True, True, f"{CERT} is not enrolled")
    assert not_enrolled.action == "stop" and f"mokutil --import {CERT}" in not_enrolled.message
    sign = secure_boot_plan("enabled", True, KEY, CERT, True, True, f"{CERT} is already enrolled")
    assert (sign.action, sign.message) == (
        "sign",
        f"Secure Boot is on: DKMS signs the module with the enrolled MOK {CERT}",
    )


# -- the CUDA prefix ------------------------------------------------------------------------------------------


def test_cuda_home_is_the_toolkit_packages_prefix() -> None:
    assert cuda_home("13.0.2") == "/usr/local/cuda-13.0"
    assert cuda_home("12.8") == "/usr/local/cuda-12.8"
    with pytest.raises(ValueError, match="cuda_toolkit_version"):
        cuda_home("13")
