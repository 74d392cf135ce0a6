"""Pulumi entry point: the fleet in stack config, one GpuNode per host (see vllm_fleet/pulumi/)."""

from vllm_fleet.pulumi.program import run

run()
