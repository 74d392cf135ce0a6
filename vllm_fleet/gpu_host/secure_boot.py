"""Secure Boot and DKMS: with Secure Boot on, the kernel loads only modules signed by a key it trusts, so an
unsigned DKMS build of the NVIDIA module leaves the host without a driver. Decide, from facts read on the host,
whether to go on (off), sign with an enrolled Machine Owner Key, or stop before anything is installed."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Literal

State = Literal["enabled", "disabled", "no-efi", "unknown"]
Action = Literal["none", "sign", "stop"]

MAKE_KEY = (
    "make a key if you have none (DKMS 3 makes {key} and {cert} on its first signed build, or `openssl req -new "
    "-x509 -newkey rsa:2048 -nodes -days 36500 -outform DER -subj '/CN=vllm-fleet MOK/' -keyout {key} -out "
    "{cert}`)"
)
ENROL = (
    "`mokutil --import {cert}` (it asks for a one-time password), reboot and choose Enroll MOK in MokManager at the "
    "console, then set nvidia_driver_secure_boot_sign: true and converge again"
)


def _steps(key: str, cert: str) -> str:
    return MAKE_KEY.format(key=key, cert=cert) + ", " + ENROL.format(cert=cert)


@dataclass(frozen=True)
class SecureBootPlan:
    state: State
    action: Action
    message: str


def secure_boot_state(efi: bool, mokutil_rc: int | None, mokutil_out: str, efivar_b64: str | None) -> State:
    """``mokutil --sb-state`` when it answered, else the SecureBoot EFI variable (4 attribute bytes, then 1 = on)."""
    if not efi:
        return "no-efi"
    text = mokutil_out.lower()
    if mokutil_rc == 0 and "secureboot enabled" in text:
        return "enabled"
    if mokutil_rc == 0 and "secureboot disabled" in text:
        return "disabled"
    if efivar_b64:
        try:
            raw = base64.b64decode(efivar_b64, validate=True)
        except (binascii.Error, ValueError):
            return "unknown"
        if len(raw) >= 5:
            return "enabled" if raw[4] == 1 else "disabled"
    return "unknown"


def secure_boot_plan(
    state: State,
    sign: bool,
    key: str,
    cert: str,
    key_exists: bool = False,
    cert_exists: bool = False,
    test_key_out: str = "",
) -> SecureBootPlan:
    """What the driver role does about Secure Boot, and the message it prints (a stop names the fix)."""
    steps = _steps(key, cert)
    if state == "no-efi":
        return SecureBootPlan(
            state, "none", "no EFI firmware (legacy BIOS boot): no Secure Boot, modules load unsigned"
        )
    if state == "disabled":
        return SecureBootPlan(state, "none", "Secure Boot is off: the DKMS module loads unsigned")
    if state == "unknown":
        return SecureBootPlan(
            state,
            "none",
            "Secure Boot state unknown (no mokutil answer, no readable SecureBoot EFI variable): going on unsigned; "
            "if the module then fails to load ('Key was rejected by service' in dmesg), Secure Boot is on: " + steps,
        )
    if not sign:
        return SecureBootPlan(
            state,
            "stop",
            "Secure Boot is on: the kernel would refuse the unsigned DKMS build of the NVIDIA module and the host "
            "would come up without a GPU driver. Nothing was installed. Fix: sign with a Machine Owner Key -- "
            + steps
            + " -- or turn Secure Boot off in the firmware setup.",
        )
    missing = [
        f"{what} {path}"
        for what, path, there in (("key", key, key_exists), ("certificate", cert, cert_exists))
        if not there
    ]
    if missing:
        return SecureBootPlan(
            state,
            "stop",
            f"Secure Boot is on and nvidia_driver_secure_boot_sign is true, but the MOK {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing on the host. Nothing was installed. Fix: {steps} "
            "(or point nvidia_driver_mok_key / nvidia_driver_mok_cert at your enrolled key).",
        )
    said = test_key_out.lower()
    if "already enrolled" in said:
        return SecureBootPlan(state, "sign", f"Secure Boot is on: DKMS signs the module with the enrolled MOK {cert}")
    pending = "enrollment request" in said
    return SecureBootPlan(
        state,
        "stop",
        f"Secure Boot is on and the MOK {cert} is "
        + ("waiting for its enrolment at the next boot" if pending else "not enrolled")
        + ": a module signed with it would still be refused. Nothing was installed. Fix: "
        + ("reboot and choose Enroll MOK in MokManager at the console" if pending else ENROL.format(cert=cert))
        + ".",
    )
