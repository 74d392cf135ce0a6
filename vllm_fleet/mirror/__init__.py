"""The lab mirror an air-gapped site would run: an apt repository + a Python wheelhouse over HTTP.

* :mod:`vllm_fleet.mirror.standin` builds clearly-named stand-in ``.deb`` files (real NVIDIA
  package names, versions and relations; tiny harmless contents) from ``tools/standin_debs/``.
* :mod:`vllm_fleet.mirror.apt_repo` lays them out like NVIDIA's CUDA network repository
  (flat repo, signed ``InRelease``/``Release.gpg``, a lab key generated once).
* :mod:`vllm_fleet.mirror.wheelhouse` writes a PEP 503 simple index over wheel directories.
* :mod:`vllm_fleet.mirror.build` puts the three together under the cache, rebuilding only
  what changed; :mod:`vllm_fleet.mirror.server` serves the tree over HTTP (detached).

See ``docs/mirror.md``.
"""

from __future__ import annotations


class MirrorError(RuntimeError):
    """Building or serving the mirror failed; the message says what to do."""
