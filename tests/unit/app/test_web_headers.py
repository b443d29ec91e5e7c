"""The dashboard page carries a Content-Security-Policy and X-Frame-Options: DENY, and holds nothing the
policy would refuse (inline scripts, inline handlers or styles, files from another origin)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient


def test_the_dashboard_page_carries_its_security_headers(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    policy = dict(part.strip().split(" ", 1) for part in page.headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'self'" and policy["frame-ancestors"] == "'none'"
    assert policy["object-src"] == "'none'" and policy["base-uri"] == "'none'"
    assert "unsafe" not in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


def test_the_page_holds_nothing_the_policy_refuses(client: TestClient) -> None:
    html = client.get("/").text
    assert re.search(r"<script(?![^>]*\ssrc=)", html) is None, "inline script"
    assert re.search(r"<style|\sstyle=|\son[a-z]+=", html) is None, "inline style or event handler"
    loaded = re.findall(r'\s(?:src|href)="([^"]*)"', html)
    assert loaded and all(url.startswith(("/static/", "#")) for url in loaded), loaded
    for url in (url for url in loaded if url.startswith("/static/")):
        assert client.get(url).status_code == 200, url
