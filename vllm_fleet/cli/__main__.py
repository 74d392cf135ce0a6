"""``python -m vllm_fleet.cli``: the ``vllm-fleet`` command (the playbooks run it with the controller's Python)."""

from vllm_fleet.cli.commands import main

main()
