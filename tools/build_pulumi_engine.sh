#!/usr/bin/env bash
# Build the Pulumi engine (CLI + Python language host) from Go modules into a
# per-user cache outside the repo, so `pulumi` works without get.pulumi.com or
# GitHub releases. Idempotent: a second run only checks the marker and prints
# the bin dir. Progress goes to stderr; the LAST stdout line is the bin dir.
#
#   tools/build_pulumi_engine.sh            # build if needed, print bin dir
#   source tools/pulumi_env.sh              # build if needed + set PATH/env
#
# Result (VLLM_FLEET_CACHE defaults to ~/.cache/vllm-fleet):
#   $VLLM_FLEET_CACHE/pulumi/<version>/bin/   pulumi, pulumi-language-python,
#                                            pulumi-language-python-exec,
#                                            pulumi-resource-pulumi-python
#   $VLLM_FLEET_CACHE/pulumi/<version>/home/  PULUMI_HOME (plugins, workspaces)
#   $VLLM_FLEET_CACHE/pulumi/<version>/src/   generated wrapper Go module
#   $VLLM_FLEET_CACHE/go/{mod,build}          GOMODCACHE / GOCACHE
#
# Needs: Go >= 1.26.6 (go on PATH, $GO, or /usr/local/go/bin/go) and the Go
# module proxy (+ its sumdb) for a cold build; no cgo. Measured on 2 cores:
# cold ~9 min (peak RSS ~1.9 GiB), rebuild with warm Go caches ~15 s, no-op
# rerun ~0.01 s; cache 3.3 GiB (go/mod 1.4 GiB, go/build 1.7 GiB, bin 139 MiB;
# go/build may be deleted after a build, it only speeds up rebuilds).
#
# What is built, and why it looks like this:
#  * pulumi CLI: github.com/pulumi/pulumi/pkg/v3/cmd/pulumi. pkg/v3's go.mod
#    has `replace` directives, so `go install pkg@version` is refused; we build
#    it from a generated wrapper module that requires pkg/v3 and sdk/v3 at the
#    same version and repeats the non-local `replace` lines of pkg/sdk go.mod.
#    The version ldflag is mandatory: the Automation API refuses a CLI that
#    reports no version.
#  * pulumi-language-python: the upstream module
#    (github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3) is NOT
#    served by the module proxy we can reach (403 for every version, pseudo
#    versions included), so this script generates a small language host of our
#    own on top of the Pulumi Go SDK (sdk/v3/python/toolchain etc.); see
#    tools/pulumi_engine/cmd/pulumi-language-python. It runs programs through the SDK's real
#    pulumi-language-python-exec shim and honours the Pulumi.yaml runtime
#    options `toolchain` (pip|uv|poetry) and `virtualenv`.
#  * pulumi-resource-pulumi-python: the SDK's dynamic-provider shim, so
#    Python dynamic providers (pulumi.dynamic) work.
#  * upstream's pulumi-resource-command (pulumi-command): NOT built. Its module
#    github.com/pulumi/pulumi-command/provider is refused by the module proxy
#    (no provider/vX tags, only pseudo-versions, all 403/404). In its place:
#  * pulumi-resource-vllm-fleet-command: our own provider of local and SSH
#    command resources (tools/pulumi_engine/cmd/pulumi-resource-vllm-fleet-command),
#    with pulumi-command's create/update/delete/triggers semantics. Run under
#    the name pulumi-resource-command it serves pulumi-command's package
#    (`command`, the pulumi_command SDK's types and inputs) at the SDK's
#    version: installed into PULUMI_HOME as resource-command-v<that version>
#    (the engine matches a cached plugin's version exactly; ambient plugins on
#    PATH are off in vllm_fleet/deploy/engine.py). `pulumi plugin install resource
#    command <ver>` (upstream's) replaces it and is kept by later builds.
#    With another pulumi CLI or PULUMI_HOME: pulumi plugin install resource command
#    <ver> --file <cache>/pulumi/<v>/home/plugins/resource-command-v<ver>/pulumi-resource-command
#
# Gotchas (checked with this engine):
#  * `pulumi install` downloads the plugins named by the venv's pulumi-*
#    packages (pulumi-plugin.json) from get.pulumi.com even with
#    PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true, and it also upgrades
#    pip/setuptools/wheel in the venv. Install Python deps with pip directly.
#  * `pulumi install` runs `python -m venv <virtualenv>`, which fails if the
#    Pulumi.yaml `virtualenv` path is a symlink; use a real dir (an absolute
#    path is fine).
set -euo pipefail

# ---- pins -------------------------------------------------------------------
PULUMI_VERSION="3.274.1"          # github.com/pulumi/pulumi/{pkg,sdk}/v3 (CLI)
# Pair with the PyPI SDK `pulumi==3.272.0` (newest on PyPI; older SDKs are
# supported by a newer CLI) and `pulumi-command==1.2.1` (needs plugin v1.2.1).
CLIPBOARD_REPLACE="github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e"
XTEXT_REPLACE="golang.org/x/text v0.41.0"   # from sdk/v3 go.mod
# ------------------------------------------------------------------------------

CACHE_ROOT="${VLLM_FLEET_CACHE:-$HOME/.cache/vllm-fleet}"
ENGINE_DIR="$CACHE_ROOT/pulumi/$PULUMI_VERSION"
BIN_DIR="$ENGINE_DIR/bin"
MARKER="$ENGINE_DIR/.complete"
JOBS="${VLLM_FLEET_GO_JOBS:-$(nproc 2>/dev/null || echo 2)}"
BIN_FILES=(pulumi pulumi-language-python pulumi-language-python-exec pulumi-resource-pulumi-python
	pulumi-resource-vllm-fleet-command)
# Our Go sources (language host, command provider), built inside the wrapper module.
GO_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/pulumi_engine"

log() { printf '[build_pulumi_engine] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

gomod_template() {
	cat <<GOMOD
module vllm-fleet.local/pulumi-engine

go 1.26.6

require (
	github.com/pulumi/pulumi/pkg/v3 v$PULUMI_VERSION
	github.com/pulumi/pulumi/sdk/v3 v$PULUMI_VERSION
)

replace github.com/atotto/clipboard => $CLIPBOARD_REPLACE

replace golang.org/x/text => $XTEXT_REPLACE
GOMOD
}

# Everything that determines the result; a change forces a rebuild.
fingerprint() {
	{
		echo "pulumi=$PULUMI_VERSION files=${BIN_FILES[*]}"
		gomod_template
		# Tests too: src/ keeps the copy `go test` runs (tests/e2e/test_command_provider_go.py).
		cat "$GO_SRC"/cmd/*/*.go
	} | sha256sum | cut -c1-16
}

is_complete() {
	[[ -f "$MARKER" ]] && [[ "$(cat "$MARKER")" == "$1" ]] || return 1
	local f
	for f in "${BIN_FILES[@]}"; do [[ -x "$BIN_DIR/$f" ]] || return 1; done
	compgen -G "$ENGINE_DIR/home/plugins/resource-vllm-fleet-command-v*/pulumi-resource-vllm-fleet-command" >/dev/null &&
		compgen -G "$ENGINE_DIR/home/plugins/resource-command-v*/pulumi-resource-command" >/dev/null
}

main() {
	local want
	want="$(fingerprint)"
	if is_complete "$want"; then
		log "up to date: $BIN_DIR (pulumi v$PULUMI_VERSION)"
		echo "$BIN_DIR"
		return 0
	fi

	mkdir -p "$ENGINE_DIR"
	# Serialise concurrent builds (two shells, parallel CI steps).
	if command -v flock >/dev/null 2>&1; then
		exec 9>"$ENGINE_DIR/.lock"
		if ! flock -n 9; then
			log "another build holds $ENGINE_DIR/.lock; waiting"
			flock 9
		fi
		if is_complete "$want"; then
			log "built by a concurrent run: $BIN_DIR"
			echo "$BIN_DIR"
			return 0
		fi
	fi

	local go_bin="${GO:-}"
	if [[ -z "$go_bin" ]]; then
		go_bin="$(command -v go || true)"
		[[ -n "$go_bin" ]] || go_bin=/usr/local/go/bin/go
	fi
	[[ -x "$go_bin" ]] || die "Go toolchain not found (set GO=/path/to/go); need Go >= 1.26.6"

	export GOMODCACHE="$CACHE_ROOT/go/mod"
	export GOCACHE="$CACHE_ROOT/go/build"
	export GOFLAGS="-mod=mod -buildvcs=false"
	export GOWORK=off
	export CGO_ENABLED=0
	export GO111MODULE=on

	local src="$ENGINE_DIR/src" stage="$ENGINE_DIR/.stage"
	log "building Pulumi engine v$PULUMI_VERSION with $("$go_bin" version) (-p $JOBS)"
	log "  cache: $CACHE_ROOT (GOMODCACHE/GOCACHE under go/)"
	rm -rf "$stage" "$MARKER"
	rm -rf "$src/cmd"
	mkdir -p "$src" "$stage" "$ENGINE_DIR/home"
	gomod_template >"$src/go.mod"
	cp -r "$GO_SRC/cmd" "$src/cmd"

	local start=$SECONDS
	local ldflags="-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION"
	log "go build pulumi + language host + command provider (cold: ~9 min on 2 cores; warm: ~15 s)"
	(cd "$src" && "$go_bin" build -trimpath -p "$JOBS" -ldflags "$ldflags" -o "$stage/" \
		github.com/pulumi/pulumi/pkg/v3/cmd/pulumi \
		./cmd/pulumi-language-python \
		./cmd/pulumi-resource-vllm-fleet-command) >&2 ||
		die "go build failed"

	local sdk_dir
	sdk_dir="$(cd "$src" && "$go_bin" list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)"
	[[ -n "$sdk_dir" && -d "$sdk_dir/python" ]] || die "cannot locate sdk/v3 module source"
	install -m 0755 "$sdk_dir/python/cmd/pulumi-language-python-exec" "$stage/"
	install -m 0755 "$sdk_dir/python/dist/pulumi-resource-pulumi-python" "$stage/"

	local got
	got="$(PULUMI_HOME="$ENGINE_DIR/home" PULUMI_SKIP_UPDATE_CHECK=true "$stage/pulumi" version)"
	[[ "$got" == "v$PULUMI_VERSION" ]] || die "built pulumi reports '$got', want v$PULUMI_VERSION"
	got="$("$stage/pulumi-language-python" -version)"
	[[ "$got" == "v$PULUMI_VERSION" ]] || die "built language host reports '$got'"
	# Resource plugins other than Pulumi's bundled ones are looked up in PULUMI_HOME, not next to `pulumi`.
	local provider_version
	provider_version="$("$stage/pulumi-resource-vllm-fleet-command" -version)"
	rm -rf "$ENGINE_DIR/home/plugins/resource-vllm-fleet-command-"*
	PULUMI_HOME="$ENGINE_DIR/home" PULUMI_SKIP_UPDATE_CHECK=true "$stage/pulumi" plugin install \
		resource vllm-fleet-command "$provider_version" --file "$stage/pulumi-resource-vllm-fleet-command" >&2 ||
		die "cannot install the vllm-fleet-command plugin into $ENGINE_DIR/home"
	# The same binary run as pulumi-resource-command serves pulumi-command's package (`command`) at the
	# version the pulumi_command SDK asks for: the engine's plugin cache matches that version exactly, and
	# `pulumi plugin install resource command <v>` (upstream's provider, where it can be had) replaces it.
	# An installed plugin without our marker file is upstream's: it is kept.
	cp "$stage/pulumi-resource-vllm-fleet-command" "$stage/pulumi-resource-command"
	provider_version="$("$stage/pulumi-resource-command" -version)"
	local plugin_dir="$ENGINE_DIR/home/plugins/resource-command-v$provider_version"
	if [[ -d "$plugin_dir" && ! -f "$plugin_dir/.vllm-fleet" ]]; then
		log "keeping the command plugin installed in $plugin_dir (not ours: upstream's pulumi-command)"
	else
		rm -rf "$plugin_dir" "$plugin_dir.lock"
		PULUMI_HOME="$ENGINE_DIR/home" PULUMI_SKIP_UPDATE_CHECK=true "$stage/pulumi" plugin install \
			resource command "$provider_version" --file "$stage/pulumi-resource-command" >&2 ||
			die "cannot install the command plugin into $ENGINE_DIR/home"
		echo "built by tools/build_pulumi_engine.sh" >"$plugin_dir/.vllm-fleet"
	fi
	# Not in bin/ (on PATH): with ambient plugins on, a copy there would shadow upstream's in the plugin cache.
	rm "$stage/pulumi-resource-command"

	rm -rf "$BIN_DIR.old"
	[[ ! -e "$BIN_DIR" ]] || mv "$BIN_DIR" "$BIN_DIR.old"
	mv "$stage" "$BIN_DIR"
	rm -rf "$BIN_DIR.old"
	echo "$want" >"$MARKER" # written last: its presence means a complete install

	log "done in $((SECONDS - start))s: $(du -sh "$BIN_DIR" | cut -f1) in $BIN_DIR"
	echo "$BIN_DIR"
}

main "$@"
