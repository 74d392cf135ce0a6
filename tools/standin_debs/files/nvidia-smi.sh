#!/bin/sh
# nvidia-smi -- vllm-fleet lab stand-in: NOT the NVIDIA driver.
#
# Installed by the stand-in package nvidia-smi @DRIVER_DEB_VERSION@ on CPU-only lab hosts.
# It talks to no GPU: it reports the driver version its package pins, and GPUs described by
# /etc/vllm-fleet-standin/nvidia-smi.conf (shell assignments, all optional):
#   GPU_COUNT=1  GPU_NAME="..."  GPU_MEMORY_MIB=81559  GPU_COMPUTE_CAP=9.0
#   GPU_ECC_UNCORRECTED=0  GPU_REMAP_PENDING=No  GPU_REMAP_FAILURE=No  (faults a lab plays; a suffix _<index>,
#   e.g. GPU_ECC_UNCORRECTED_1=4, sets one GPU's)
# Supported: plain `nvidia-smi`, -L/--list-gpus, --version, -q, -pm 0|1, -i/--id,
#   --query-gpu=FIELD[,FIELD...] --format=csv[,noheader][,nounits],
#   --query-remapped-rows=FIELD[,FIELD...] --format=csv[,noheader]
set -u

DRIVER_VERSION="@DRIVER_VERSION@"
CUDA_VERSION="@DRIVER_CUDA_VERSION@"
GPU_COUNT=1
GPU_NAME="vllm-fleet lab stand-in GPU"
GPU_MEMORY_MIB=81559
GPU_COMPUTE_CAP="9.0"
GPU_ECC_UNCORRECTED=0
GPU_REMAP_PENDING=No
GPU_REMAP_FAILURE=No
CONF=/etc/vllm-fleet-standin/nvidia-smi.conf
# shellcheck disable=SC1090
[ -r "$CONF" ] && . "$CONF"
PERSISTENCED_PID=/run/nvidia-persistenced/nvidia-persistenced.pid

die() {
  echo "$1" >&2
  exit "${2:-2}"
}

persistence_mode() {
  if [ -r "$PERSISTENCED_PID" ] && kill -0 "$(cat "$PERSISTENCED_PID" 2>/dev/null)" 2>/dev/null; then
    echo Enabled
  else
    echo Disabled
  fi
}

gpu_ids() {
  if [ -n "$ONLY_ID" ]; then
    case "$ONLY_ID" in
      *[!0-9]* | '') die "No devices were found" 6 ;;
    esac
    [ "$ONLY_ID" -lt "$GPU_COUNT" ] || die "No devices were found" 6
    echo "$ONLY_ID"
    return
  fi
  i=0
  while [ "$i" -lt "$GPU_COUNT" ]; do
    echo "$i"
    i=$((i + 1))
  done
}

# per_gpu NAME INDEX: $NAME_<INDEX> when the conf sets it, else $NAME
per_gpu() {
  eval "printf '%s' \"\${${1}_${2}:-\$${1}}\""
}

uuid() { printf 'GPU-5eed0000-0000-4000-8000-%012d' "$1"; }
bus_id() { printf '00000000:%02X:00.0' $(($1 + 1)); }

# field NAME INDEX -> "header<TAB>value<TAB>unit"
field() {
  case "$1" in
    driver_version) printf 'driver_version\t%s\t' "$DRIVER_VERSION" ;;
    name | gpu_name) printf 'name\t%s\t' "$GPU_NAME" ;;
    count) printf 'count\t%s\t' "$GPU_COUNT" ;;
    index) printf 'index\t%s\t' "$2" ;;
    uuid | gpu_uuid) printf 'uuid\t%s\t' "$(uuid "$2")" ;;
    pci.bus_id | gpu_bus_id) printf 'pci.bus_id\t%s\t' "$(bus_id "$2")" ;;
    memory.total) printf 'memory.total [MiB]\t%s\tMiB' "$GPU_MEMORY_MIB" ;;
    memory.used) printf 'memory.used [MiB]\t0\tMiB' ;;
    memory.free) printf 'memory.free [MiB]\t%s\tMiB' "$GPU_MEMORY_MIB" ;;
    memory.reserved) printf 'memory.reserved [MiB]\t0\tMiB' ;;
    utilization.gpu) printf 'utilization.gpu [%%]\t0\t%%' ;;
    utilization.memory) printf 'utilization.memory [%%]\t0\t%%' ;;
    temperature.gpu) printf 'temperature.gpu\t30\t' ;;
    power.draw) printf 'power.draw [W]\t50.00\tW' ;;
    power.limit) printf 'power.limit [W]\t700.00\tW' ;;
    persistence_mode) printf 'persistence_mode\t%s\t' "$(persistence_mode)" ;;
    compute_cap) printf 'compute_cap\t%s\t' "$GPU_COMPUTE_CAP" ;;
    compute_mode) printf 'compute_mode\tDefault\t' ;;
    mig.mode.current) printf 'mig.mode.current\tDisabled\t' ;;
    vbios_version) printf 'vbios_version\t00.00.00.00.00\t' ;;
    pstate) printf 'pstate\tP0\t' ;;
    ecc.errors.uncorrected.volatile.total) printf 'ecc.errors.uncorrected.volatile.total\t%s\t' "$(per_gpu GPU_ECC_UNCORRECTED "$2")" ;;
    remapped_rows.pending) printf 'remapped_rows.pending\t%s\t' "$(per_gpu GPU_REMAP_PENDING "$2")" ;;
    remapped_rows.failure) printf 'remapped_rows.failure\t%s\t' "$(per_gpu GPU_REMAP_FAILURE "$2")" ;;
    *) return 1 ;;
  esac
}

query_gpu() {
  fields=$1
  fmt=$2
  case ",$fmt," in
    *,csv,*) ;;
    *) die "Format must be specified: --format=csv[,noheader][,nounits]" ;;
  esac
  header=1
  units=1
  case ",$fmt," in *,noheader,*) header=0 ;; esac
  case ",$fmt," in *,nounits,*) units=0 ;; esac
  old_ifs=$IFS
  IFS=,
  # shellcheck disable=SC2086
  set -- $fields
  IFS=$old_ifs
  for f in "$@"; do
    f=$(echo "$f" | tr -d ' ')
    field "$f" 0 >/dev/null || die "Field \"$f\" is not a valid field to query."
  done
  if [ "$header" -eq 1 ]; then
    line=""
    for f in "$@"; do
      f=$(echo "$f" | tr -d ' ')
      h=$(field "$f" 0 | cut -f1)
      line="${line:+$line, }$h"
    done
    echo "$line"
  fi
  for i in $(gpu_ids); do
    line=""
    for f in "$@"; do
      f=$(echo "$f" | tr -d ' ')
      row=$(field "$f" "$i")
      v=$(printf '%s' "$row" | cut -f2)
      u=$(printf '%s' "$row" | cut -f3)
      if [ "$units" -eq 1 ] && [ -n "$u" ]; then
        if [ "$u" = "%" ]; then v="$v %"; else v="$v $u"; fi
      fi
      line="${line:+$line, }$v"
    done
    echo "$line"
  done
}

list_gpus() {
  for i in $(gpu_ids); do
    echo "GPU $i: $GPU_NAME (UUID: $(uuid "$i"))"
  done
}

version() {
  printf 'NVIDIA-SMI version  : %s\n' "$DRIVER_VERSION"
  printf 'NVML version        : %s\n' "${DRIVER_VERSION%.*}"
  printf 'DRIVER version      : %s\n' "$DRIVER_VERSION"
  printf 'CUDA Version        : %s\n' "$CUDA_VERSION"
}

query() {
  echo
  echo "==============NVSMI LOG=============="
  echo
  printf '%-40s: %s\n' "Timestamp" "$(date)"
  printf '%-40s: %s\n' "Driver Version" "$DRIVER_VERSION"
  printf '%-40s: %s\n' "CUDA Version" "$CUDA_VERSION"
  echo
  printf '%-40s: %s\n' "Attached GPUs" "$GPU_COUNT"
  for i in $(gpu_ids); do
    echo "GPU $(bus_id "$i")"
    printf '    %-36s: %s\n' "Product Name" "$GPU_NAME"
    printf '    %-36s: %s\n' "Persistence Mode" "$(persistence_mode)"
    printf '    %-36s: %s\n' "GPU UUID" "$(uuid "$i")"
    printf '    %-36s: %s\n' "Minor Number" "$i"
    echo "    FB Memory Usage"
    printf '        %-32s: %s MiB\n' "Total" "$GPU_MEMORY_MIB"
    printf '        %-32s: %s MiB\n' "Used" "0"
    printf '        %-32s: %s MiB\n' "Free" "$GPU_MEMORY_MIB"
  done
  echo
  echo "vllm-fleet lab stand-in: NOT the NVIDIA driver"
}

table() {
  date '+%a %b %e %H:%M:%S %Y'
  sep='+-----------------------------------------------------------------------------------------+'
  cols='+-----------------------------------------+------------------------+----------------------+'
  echo "$sep"
  printf '| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|\n' \
    "$DRIVER_VERSION" "$DRIVER_VERSION" "$CUDA_VERSION"
  echo "$cols"
  echo '| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |'
  echo '| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |'
  echo '|                                         |                        |               MIG M. |'
  echo '|=========================================+========================+======================|'
  pm=Off
  [ "$(persistence_mode)" = Enabled ] && pm=On
  for i in $(gpu_ids); do
    name=$(printf '%s' "$GPU_NAME" | cut -c1-29)
    printf '| %3d  %-29s  %-3s |   %-16s %3s |                    0 |\n' "$i" "$name" "$pm" "$(bus_id "$i")" Off
    printf '| N/A   30C    P0             50W /  700W | %7sMiB / %6sMiB |      0%%      Default |\n' \
      0 "$GPU_MEMORY_MIB"
    echo '|                                         |                        |             Disabled |'
    echo "$cols"
  done
  echo
  echo "$sep"
  echo '| Processes:                                                                              |'
  echo '|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |'
  echo '|        ID   ID                                                               Usage      |'
  echo '|=========================================================================================|'
  echo '|  No running processes found                                                             |'
  echo "$sep"
  echo "vllm-fleet lab stand-in: NOT the NVIDIA driver (no GPU was queried)"
}

QUERY_GPU=""
FORMAT=""
ONLY_ID=""
MODE=table
while [ $# -gt 0 ]; do
  case "$1" in
    --query-gpu=*) QUERY_GPU=${1#*=}; MODE=query_gpu ;;
    --query-gpu) shift; QUERY_GPU=${1:-}; MODE=query_gpu ;;
    --query-remapped-rows=*) QUERY_GPU=${1#*=}; MODE=query_gpu ;;
    --format=*) FORMAT=${1#*=} ;;
    --format) shift; FORMAT=${1:-} ;;
    -i | --id) shift; ONLY_ID=${1:-} ;;
    --id=*) ONLY_ID=${1#*=} ;;
    -L | --list-gpus) MODE=list ;;
    -q | --query) MODE=query ;;
    --version) MODE=version ;;
    -pm | --persistence-mode) shift
      case "${1:-}" in
        0 | DISABLED) state=Disabled ;;
        1 | ENABLED) state=Enabled ;;
        *) die "Invalid persistence mode" ;;
      esac
      for i in $(gpu_ids); do echo "$state persistence mode for GPU $(bus_id "$i")."; done
      echo "All done."
      exit 0 ;;
    -h | --help)
      echo "nvidia-smi (vllm-fleet lab stand-in: NOT the NVIDIA driver) $DRIVER_VERSION"
      echo "usage: nvidia-smi [-L] [-q] [--version] [-i ID] [-pm 0|1] [--query-gpu=F,.. --format=csv[,noheader][,nounits]]"
      exit 0 ;;
    *) die "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help. ($1 is not supported by the vllm-fleet stand-in)" ;;
  esac
  shift
done

case "$MODE" in
  query_gpu)
    [ -n "$QUERY_GPU" ] || die "--query-gpu needs a list of fields"
    query_gpu "$QUERY_GPU" "$FORMAT" ;;
  list) list_gpus ;;
  query) query ;;
  version) version ;;
  *) table ;;
esac
