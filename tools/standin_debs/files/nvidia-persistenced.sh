#!/bin/sh
# nvidia-persistenced -- vllm-fleet lab stand-in: NOT the NVIDIA driver.
# A harmless daemon for CPU-only lab hosts: it records its pid where NVIDIA's daemon does
# and sleeps until it is stopped. Arguments are accepted and ignored (except --version).
set -u
case "${1:-}" in
  --version | -v)
    echo "nvidia-persistenced:  version @DRIVER_VERSION@ (vllm-fleet lab stand-in: NOT the NVIDIA driver)"
    exit 0 ;;
esac
RUNDIR=/run/nvidia-persistenced
mkdir -p "$RUNDIR"
echo $$ >"$RUNDIR/nvidia-persistenced.pid"
cleanup() {
  rm -f "$RUNDIR/nvidia-persistenced.pid"
  exit 0
}
trap cleanup TERM INT HUP
echo "nvidia-persistenced @DRIVER_VERSION@: vllm-fleet lab stand-in: NOT the NVIDIA driver; sleeping"
while :; do
  sleep 3600 &
  wait $!
done
