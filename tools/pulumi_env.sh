# shellcheck shell=bash
# Source this file (bash) to use the locally built Pulumi engine offline:
#
#   source tools/pulumi_env.sh
#
# It runs tools/build_pulumi_engine.sh (a no-op once the engine is cached;
# a cold build takes ~9 minutes on 2 cores), then exports:
#   PATH                                  engine bin dir prepended
#   PULUMI_HOME                           <cache>/pulumi/<version>/home
#   PULUMI_SKIP_UPDATE_CHECK=true         no version check against pulumi.com
#   PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true   never download plugins
#   PULUMI_IGNORE_AMBIENT_PLUGINS=true    ignore stray pulumi-* plugins on PATH
#   PULUMI_BACKEND_URL                    file:// state backend (never Pulumi
#                                         Cloud); kept if already set to a
#                                         non-http backend, else
#                                         file://$VLLM_FLEET_PULUMI_STATE or
#                                         file://<cache>/pulumi-state (the
#                                         same dir vllm_fleet/deploy/engine.py uses)
#   PULUMI_CONFIG_PASSPHRASE_FILE         <cache>/pulumi-passphrase, only if
#                                         that file exists (deploy.py creates
#                                         it) and no passphrase is set yet
#   VLLM_FLEET_PULUMI_BIN                 the engine bin dir
# It does not change shell options, so it is safe under `set -euo pipefail`.

if ! (return 0 2>/dev/null); then
	echo "pulumi_env.sh: source this file (source tools/pulumi_env.sh), don't run it" >&2
	exit 1
fi
if [ -z "${BASH_VERSION:-}" ]; then
	echo "pulumi_env.sh: source it from bash" >&2
	return 1
fi

_vf_tools="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_vf_cache="${VLLM_FLEET_CACHE:-$HOME/.cache/vllm-fleet}"

if _vf_out="$("$_vf_tools/build_pulumi_engine.sh")" &&
	_vf_bin="${_vf_out##*$'\n'}" &&
	[ -x "$_vf_bin/pulumi" ]; then
	case ":$PATH:" in
	*":$_vf_bin:"*) ;;
	*) export PATH="$_vf_bin:$PATH" ;;
	esac
	export VLLM_FLEET_PULUMI_BIN="$_vf_bin"
	export PULUMI_HOME="${_vf_bin%/bin}/home"
	export PULUMI_SKIP_UPDATE_CHECK=true
	export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
	export PULUMI_IGNORE_AMBIENT_PLUGINS=true
	case "${PULUMI_BACKEND_URL:-}" in
	"" | http://* | https://*)
		if [ -n "${PULUMI_BACKEND_URL:-}" ]; then
			echo "pulumi_env.sh: ignoring PULUMI_BACKEND_URL=$PULUMI_BACKEND_URL (no Pulumi Cloud)" >&2
		fi
		_vf_state="${VLLM_FLEET_PULUMI_STATE:-$_vf_cache/pulumi-state}"
		mkdir -p "$_vf_state"
		export PULUMI_BACKEND_URL="file://$_vf_state"
		;;
	esac
	if [ -z "${PULUMI_CONFIG_PASSPHRASE+x}${PULUMI_CONFIG_PASSPHRASE_FILE+x}" ] &&
		[ -f "$_vf_cache/pulumi-passphrase" ]; then
		export PULUMI_CONFIG_PASSPHRASE_FILE="$_vf_cache/pulumi-passphrase"
	fi
	unset _vf_tools _vf_cache _vf_out _vf_bin _vf_state
else
	echo "pulumi_env.sh: building the Pulumi engine failed (see messages above)" >&2
	unset _vf_tools _vf_cache _vf_out _vf_bin _vf_state
	return 1
fi
