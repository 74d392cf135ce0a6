#!/bin/sh
# The listing of one model directory ($1) for vllm-fleet's model check (vllm_fleet/models/manifest.py reads it),
# base64 on one line: NUL-ended records "TYPE SIZE PATH" for every entry that is not a directory (TYPE is find's
# %y: f for a regular file), then "@@sha256", then "SHA256  PATH" for every regular file. One sha256sum writes
# every hash record: several writing one pipe at once interleave a record whose name holds a newline (seen under
# load), so the hashing runs on one core. vllm-fleet's own files at the top (.vllm-fleet-*) are left out.
# Read-only; GNU find, xargs and coreutils. Run by the vllm role (ansible.builtin.script) and by `vllm-fleet audit`.
set -eu
cd -- "$1" || exit 3
{
  find . -mindepth 1 -path './.vllm-fleet-*' -prune -o ! -type d -printf '%y %s %P\0'
  printf '@@sha256\0'
  find . -mindepth 1 -path './.vllm-fleet-*' -prune -o -type f -printf '%P\0' |
    xargs -0 -r sha256sum -z --
} | base64 -w0
