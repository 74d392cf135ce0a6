"""The HTML audit report: the verdict and exit code of report.summary, each host's section (what to review first,
what passed collapsed, the evidence), host data always text and never markup, nothing loaded from anywhere, and a
real browser (Debian's chromium, headless) showing it; its screenshot is kept in out/test-artifacts/."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import struct
import subprocess
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.audit_samples import START, sample_audit
from vllm_fleet.audit.html import to_html
from vllm_fleet.audit.reconcile import Finding
from vllm_fleet.audit.report import HostInfo, exit_code, summary
from vllm_fleet.project.paths import project_root

HOSTILE = "<script>alert(1)</script>"
ATTR_HOSTILE = '"><img src=x onerror=alert(2)>'
CHROMIUM = shutil.which("chromium")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def hostile_audit() -> tuple[list[Finding], list[HostInfo]]:
    """The sample fleet, with evidence references, and host data that tries to become markup."""
    findings, hosts = sample_audit()
    out = []
    for f in findings:
        if f.host != "node3":
            f = replace(f, evidence={f"{f.host}/remote/config": sha(f.host), f"{f.host}/http/metrics": sha(f.id)})
        if f.id == "VF-CFG-DISK@node2":
            f = replace(f, actual=f"{f.actual} {HOSTILE}")
        if f.id == "VF-REACH@node1":
            f = replace(f, evidence={f"node1/remote/{ATTR_HOSTILE}": sha("x")})
        out.append(f)
    return out, [*hosts[:2], replace(hosts[2], error=f"ssh: {HOSTILE}")]


class Page(HTMLParser):
    """Every start tag with its attributes, the text, and the raw content of <style> and <script>."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.raw: dict[str, list[str]] = {"style": [], "script": []}
        self._in: str | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in = tag if tag in self.raw else None

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in:
            self.raw[self._in].append(data)
        else:
            self.text.append(data)

    def words(self) -> str:
        return " ".join(" ".join(self.text).split())


def host_part(html: str, host: str) -> str:
    sections = [s for s in html.split('<section class="host ')[1:] if f'-h">{host} <' in s]
    assert len(sections) == 1, host
    return sections[0]


@pytest.mark.parametrize(
    ("hosts", "verdict", "code"),
    [(("node1",), "compliant", 0), (("node1", "node2"), "drift", 1), (("node1", "node2", "node3"), "incomplete", 2)],
)
def test_the_verdict_is_report_summarys(hosts: tuple[str, ...], verdict: str, code: int) -> None:
    findings, infos = sample_audit()
    findings = [f for f in findings if f.host in hosts]
    assert summary(findings)["result"] == verdict and exit_code(findings) == code
    html = to_html(findings, [h for h in infos if h.host in hosts], generated_at=START + 700)
    words = Page(html).words()
    assert f"Verdict: {verdict}" in words and f"exit code {code}:" in words
    assert "Generated 2026-11-29T09:31:40Z" in words
    assert "Drifted " + ("node2" if "node2" in hosts else "none") in words
    assert "Not audited " + ("node3" if "node3" in hosts else "none") in words
    assert re.search(rf"<title>vllm-fleet audit: {verdict} \({len(hosts)} hosts, ", html)


def test_a_host_without_its_info_still_has_a_section() -> None:
    findings, _ = sample_audit()
    html = to_html(findings, [])
    for host in ("node1", "node2", "node3"):
        assert "Address</dt><dd><code>—</code>" in host_part(html, host)


def test_summary_counts_by_status_and_severity() -> None:
    findings, hosts = sample_audit()
    html = to_html(findings, hosts)
    words = Page(html).words()
    counts = summary(findings)["counts"]
    assert counts == {"error": 1, "failed": 2, "not-applicable": 4, "passed": 36}
    for status, n in counts.items():
        assert re.search(rf"<li class=\"c-{status}\"><b>{n}</b>", html), status
    assert '<li class="zero"><b>0</b>' in html  # not-reviewed, shown as none
    # Severity rows of the matrix: critical has the error, the 4 reachability/service passes and the model check
    # (not applicable: the sample stages no model) on the two hosts read, 7 in all.
    assert "critical 0 1 0 2 4 7" in words and "high 2 0 0 0 14 16" in words and "total 2 1 0 4 36 43" in words
    assert "Evidence evidence/ : every collected file; evidence/manifest.json holds their sha256." in words


def test_host_sections_show_what_to_review_first_then_passed_collapsed() -> None:
    findings, hosts = hostile_audit()
    html = to_html(findings, hosts)
    node2 = host_part(html, "node2")
    assert "Address</dt><dd><code>172.31.254.12</code>" in node2 and "Profile</dt><dd>cpu-lab" in node2
    assert "vLLM</dt><dd>0.32.0" in node2 and "Collection started</dt><dd>2026-11-29T09:30:00Z" in node2
    details = node2.index("<details")
    failed = [m.start() for m in re.finditer(r'data-status="failed"', node2)]
    passed = [m.start() for m in re.finditer(r'data-status="passed"', node2)]
    assert len(failed) == 2 and max(failed) < details < min(passed) and len(passed) == 17
    row = re.search(r'<tr data-status="failed" id="VF-RUN-CONFIG:max-num-seqs@node2">(.*?)</tr>', node2, re.S)
    assert row is not None
    words = " ".join(Page(row.group(1)).words().split())
    assert words.startswith("✗ failed high VF-RUN-CONFIG:max-num-seqs every effective flag")
    assert "8 64 config file converge the host" in words  # expected and actual side by side, layer, remediation
    assert '<th scope="col">Expected</th><th scope="col">Actual</th>' in node2
    assert "<summary>Passed: 17 · not applicable: 2</summary>" in node2
    node1 = host_part(html, "node1")
    assert "Nothing to review" in node1 and '<table class="findings">\n<caption>To review' not in node1
    node3 = host_part(html, "node3")
    assert "not audited</span></h2>" in node3 and 'data-status="error"' in node3 and "<details" not in node3


def test_evidence_references_are_short_with_the_full_digest_in_a_title() -> None:
    findings, hosts = hostile_audit()
    html = to_html(findings, hosts)
    full = sha("node2")
    assert '<a href="evidence/node2/remote/config"><code>node2/remote/config</code></a>' in html
    # On paper (the print stylesheet) the rest of the digest is shown instead of the ellipsis.
    assert f'<code title="{full}">{full[:12]}<span class="rest">{full[12:]}</span><span class="ell"' in html
    assert "nothing could be collected from this host" in host_part(html, "node3")


def test_host_data_is_text_never_markup() -> None:
    findings, hosts = hostile_audit()
    html = to_html(findings, hosts)
    page = Page(html)
    assert HOSTILE not in html and ATTR_HOSTILE not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert page.words().count(HOSTILE) == 2  # the finding's actual and node3's error, as text
    assert [t for t, _ in page.tags].count("script") == 1 and "img" not in [t for t, _ in page.tags]
    assert not [a for _, attrs in page.tags for a in attrs if a.startswith("on")]
    hrefs = [attrs["href"] for t, attrs in page.tags if t == "a"]
    assert f"evidence/node1/remote/{ATTR_HOSTILE}" in hrefs  # one attribute value, quoted


def test_nothing_is_loaded_and_the_csp_allows_only_the_inline_style_and_script() -> None:
    findings, hosts = hostile_audit()
    html = to_html(findings, hosts)
    page = Page(html)
    assert not [attrs for _, attrs in page.tags if "src" in attrs or "srcset" in attrs]
    assert {t for t, _ in page.tags}.isdisjoint({"link", "img", "iframe", "object", "embed", "svg", "base"})
    for tag, attrs in page.tags:
        if tag == "a":
            assert (attrs["href"] or "").startswith(("#", "evidence/")), attrs
    assert not re.search(r"https?:|url\(|@import|//[a-z]", "".join(page.raw["style"]) + "".join(page.raw["script"]))
    csp = next(a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert csp is not None and csp.startswith("default-src 'none';")

    def digest(code: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(code.encode()).digest()).decode() + "'"

    (style,), (script,) = page.raw["style"], page.raw["script"]
    assert f"style-src {digest(style)};" in csp and f"script-src {digest(script)};" in csp
    # Without JavaScript nothing is missing: the filter is the only thing the script shows.
    assert '<div id="filter" role="search" hidden>' in html
    assert "@media print" in style


@pytest.mark.skipif(not hasattr(Finding, "counts"), reason="this checkout has no waivers")
def test_a_waived_failure_is_shown_as_such() -> None:
    findings, hosts = sample_audit()
    waiver = {"state": "active", "expires": "2027-03-31", "reason": "ticket SEC-1234"}
    findings = [replace(f, waiver=waiver) if f.status == "failed" else f for f in findings if f.host != "node3"]
    html = to_html(findings, hosts[:2])
    words = Page(html).words()
    assert "Verdict: compliant" in words and exit_code(findings) == 0
    assert "failed (waived)" in words and "Waiver (active, until 2027-03-31): ticket SEC-1234" in words


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    flags += ["--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=180, check=False)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian package `chromium`, see scripts/setup)")
def test_chromium_shows_the_report(tmp_path: Path) -> None:
    findings, hosts = hostile_audit()
    page = tmp_path / "audit.html"
    page.write_text(to_html(findings, hosts, generated_at=START + 700), encoding="utf-8")
    png = tmp_path / "audit-report.png"
    shot = chromium(f"--screenshot={png}", "--window-size=1280,1600", page.as_uri(), profile=tmp_path / "p1")
    assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
    assert png_size(png) == (1280, 1600) and png.stat().st_size > 50_000  # a page, not a blank
    artefacts = project_root() / "out" / "test-artifacts"
    artefacts.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(png, artefacts / "audit-report.png")

    run: Any = chromium("--dump-dom", page.as_uri(), profile=tmp_path / "p2")
    assert run.returncode == 0, run.stderr[-2000:]
    dom: str = run.stdout
    assert "Content Security Policy" not in run.stderr  # the inline style and script ran, nothing was refused
    assert '<div id="filter" role="search">' in dom and "43 of 43 findings shown" in dom  # the script ran
    assert '<strong id="verdict">Verdict: incomplete</strong>' in dom and "exit code 2: some host" in dom
    for n, host in enumerate(("node1", "node2", "node3"), 1):
        assert re.search(rf'<h2 id="host-{n}-h">{host} <span class="badge', dom), host
    row = re.search(r'id="VF-RUN-CONFIG:max-num-seqs@node2">(.*?)</tr>', dom, re.S)
    assert row is not None
    assert '<td class="expected"><code>8</code></td>' in row.group(1)
    assert '<td class="actual drift"><code>64</code></td>' in row.group(1)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom and HOSTILE not in dom and "<img" not in dom
    assert dom.count("<script") == 1
