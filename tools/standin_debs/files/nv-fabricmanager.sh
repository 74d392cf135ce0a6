#!/bin/sh
# nv-fabricmanager -- vllm-fleet lab stand-in: NOT the NVIDIA Fabric Manager.
# A harmless daemon for CPU-only lab hosts: `-c CONFIG` is accepted (and must exist, like the
# real one), --version reports the pinned version, otherwise it sleeps until stopped.
set -u
CONFIG=/usr/share/nvidia/nvswitch/fabricmanager.cfg
while [ $# -gt 0 ]; do
  case "$1" in
    -v | --version)
      echo "Fabric Manager version is : @DRIVER_VERSION@"
      echo "vllm-fleet lab stand-in: NOT the NVIDIA driver"
      exit 0 ;;
    -c | --config) shift; CONFIG=${1:-} ;;
    *) ;;
  esac
  shift
done
[ -r "$CONFIG" ] || { echo "nv-fabricmanager: cannot read config file $CONFIG" >&2; exit 1; }
RUNDIR=/run/nvidia-fabricmanager
mkdir -p "$RUNDIR"
echo $$ >"$RUNDIR/nv-fabricmanager.pid"
cleanup() {
  rm -f "$RUNDIR/nv-fabricmanager.pid"
  exit 0
}
trap cleanup TERM INT HUP
echo "nv-fabricmanager @DRIVER_VERSION@ (config $CONFIG): vllm-fleet lab stand-in: NOT the NVIDIA driver; sleeping"
while :; do
  sleep 3600 &
  wait $!
done
