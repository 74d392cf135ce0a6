"""What a real GPU host needs decided before the driver goes on: kernel-module flavour, kernel upgrades (headers,
DKMS), Secure Boot, the CUDA prefix. Pure functions fed facts as data; the roles call them through the filter
plugin plugins/filter/gpu_host.py, the tests call them directly."""
