#!/usr/bin/env bash
# Install (once) MITRE's HDF tools, to check the audit's HDF report (vllm_fleet/audit/hdf.py) with them:
#   @mitre/saf   the SAF CLI (`saf view summary`, `saf convert ...`): reads HDF back as MITRE's tooling does
#   inspecjs     HDF's parser (convertFile): the exec-JSON schema compiled into a checking parser (the npm
#                package ships no schemas/*.json; Heimdall and saf load every HDF through it)
#
#   tools/mitre_tools.sh            -> prints the bin dir (holding `saf`) on its last stdout line
#   VLLM_FLEET_CACHE=/somewhere tools/mitre_tools.sh
#
# Layout under ${VLLM_FLEET_CACHE:-$HOME/.cache/vllm-fleet}:
#   npm-tools/package.json          both packages pinned to exact versions (saf 1.5.3 itself pins inspecjs 2.12.6)
#   npm-tools/node_modules/.bin/    saf; complete only when the .complete-* marker of these versions exists
#   npm-tools/npm-cache/            npm's cache, kept beside the tools (not in ~/.npm)
#
# Cold: ~45-60 s and ~620 MB (652 packages: saf brings heimdall-lite, the AWS/Azure SDKs); warm: ~0.01 s.
#
# Needs node and npm on PATH.  saf declares engines node ^22 but runs on node 20 (v20.20 here; checked by
# tests/unit/test_audit_hdf.py), so npm's EBADENGINE warning, hidden by --loglevel=error, is expected.
set -euo pipefail

SAF_VERSION=1.5.3
INSPECJS_VERSION=2.12.6

CACHE=${VLLM_FLEET_CACHE:-$HOME/.cache/vllm-fleet}
DIR=$CACHE/npm-tools
BIN=$DIR/node_modules/.bin
MARKER=$DIR/.complete-saf-$SAF_VERSION-inspecjs-$INSPECJS_VERSION

log() { echo "[mitre_tools] $*" >&2; }

for tool in node npm; do
  command -v "$tool" >/dev/null || { log "$tool not found on PATH: install Node.js (apt-get install nodejs npm)"; exit 1; }
done

tools_ok() {
  [[ -f $MARKER && -x $BIN/saf && -f $DIR/node_modules/inspecjs/lib/generated_parsers/v_1_0/exec-json.js ]]
}

mkdir -p "$DIR"
# Serialise concurrent installers (parallel test sessions, setup and a test at once).
exec 9>"$DIR/.lock"
flock 9

if ! tools_ok; then
  log "installing @mitre/saf $SAF_VERSION and inspecjs $INSPECJS_VERSION into $DIR (first time: ~1 min)"
  start=$SECONDS
  rm -f "$DIR"/.complete-*
  cat >"$DIR/package.json" <<EOF
{
  "name": "vllm-fleet-npm-tools",
  "private": true,
  "description": "MITRE HDF tools for vllm-fleet's audit tests (written by tools/mitre_tools.sh)",
  "dependencies": {
    "@mitre/saf": "$SAF_VERSION",
    "inspecjs": "$INSPECJS_VERSION"
  }
}
EOF
  (cd "$DIR" && npm install --no-audit --no-fund --no-update-notifier --prefer-offline --loglevel=error \
    --cache "$DIR/npm-cache") >&2
  got=$(cd "$DIR" && node -p 'require("@mitre/saf/package.json").version + " " + require("inspecjs/package.json").version')
  [[ $got == "$SAF_VERSION $INSPECJS_VERSION" ]] || { log "installed versions are '$got'"; exit 1; }
  touch "$MARKER"
  log "installed in $((SECONDS - start)) s"
fi

tools_ok || { log "install incomplete under $DIR"; exit 1; }
echo "$BIN"
