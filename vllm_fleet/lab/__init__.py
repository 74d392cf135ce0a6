"""The local lab: N real systemd hosts as systemd-nspawn containers on one machine.

Each host boots Debian 12 with systemd as PID 1 and sshd, lives in its own network
namespace on a private bridge (no route out), and is reachable from the controller
over SSH with strict host-key checking. Entry points: :func:`vllm_fleet.lab.hosts.lab_up`,
:func:`~vllm_fleet.lab.hosts.lab_status`, :func:`~vllm_fleet.lab.hosts.lab_down`, and the
typer app in :mod:`vllm_fleet.lab.cli`.
"""
