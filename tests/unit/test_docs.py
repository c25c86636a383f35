"""The docs site builds offline, and its generated reference pages cannot drift from the code.

The site is read where there may be no network (a lab's machine, a file:// copy), so a page that
pulled a script, stylesheet or font from a CDN would silently lose its search or styling there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import typer
import yaml

from sparkcap import docs_reference
from sparkcap.cli import app
from tests.paths import ROOT

REMOTE = re.compile(r"^\s*(https?:)?//", re.I)


class _LoadedUrls(HTMLParser):
    """Every URL a browser fetches to render the page (not the links a reader may follow)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("src", "srcset", "poster", "data"):
            if values.get(name):
                self.urls.append(str(values[name]))
        if tag == "link" and values.get("href"):
            self.urls.append(str(values["href"]))
        style = values.get("style") or ""
        self.urls += re.findall(r"url\(\s*['\"]?([^'\")]+)", style)


def _css_urls(css: str) -> list[str]:
    urls = re.findall(r"url\(\s*['\"]?([^'\")]+)", css)
    urls += re.findall(r"@import\s+(?:url\()?\s*['\"]?([^'\");\s]+)", css)
    return [u for u in urls if not u.startswith("data:")]


def _build(site: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_docs_site_builds_strictly_and_loads_nothing_from_the_network(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = _build(site)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 15
    remote: list[str] = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        parser = _LoadedUrls()
        parser.feed(text)
        remote += [f"{page.relative_to(site)}: {u}" for u in parser.urls if REMOTE.match(u)]
        assert "fonts.googleapis" not in text, page
    for sheet in site.rglob("*.css"):
        css = sheet.read_text(encoding="utf-8")
        remote += [f"{sheet.relative_to(site)}: {u}" for u in _css_urls(css) if REMOTE.match(u)]
    assert not remote, remote
    # search works from file://: the index is inlined as a script and the worker shim is local
    index = (site / "search" / "search_index.js").read_text(encoding="utf-8")
    assert index.startswith("var __index = ")
    assert "iframe-worker/shim.js" in (site / "index.html").read_text(encoding="utf-8")
    assert (site / "assets" / "vendor" / "iframe-worker" / "shim.js").is_file()


def test_a_broken_anchor_fails_the_docs_build(tmp_path: Path) -> None:
    """The strict build is what keeps moved text's cross-references true."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "concepts" / "definitions.md"
    page.write_text(page.read_text() + "\n[gone](../guides/search.md#no-such-section)\n")
    done = _build(tmp_path / "site", tmp_path / "mkdocs.yml")
    assert done.returncode != 0
    assert "no-such-section" in done.stdout + done.stderr


def test_generated_reference_pages_are_current() -> None:
    assert docs_reference.stale_pages(ROOT) == [], "run `make docs-reference`"


def test_a_stale_page_is_named_in_one_line_with_the_command_that_fixes_it(
    tmp_path: Path,
) -> None:
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs" / "reference", tmp_path / "docs" / "reference")
    cli = tmp_path / "docs" / "reference" / "cli.md"
    cli.write_text(cli.read_text().replace("--db", "--database", 1))
    command = [sys.executable, "-m", "sparkcap.docs_reference", "--root", str(tmp_path)]
    done = subprocess.run([*command, "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: docs/reference/cli.md is stale")
    assert "make docs-reference" in lines[0]
    assert "Traceback" not in done.stderr
    rewritten = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert rewritten.returncode == 0
    assert rewritten.stdout.splitlines() == ["wrote docs/reference/cli.md"]
    again = subprocess.run([*command, "--check"], capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stderr) == (0, "")


def test_cli_page_names_every_command_and_option() -> None:
    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    root = typer.main.get_command(app)
    ctx = typer.Context(root, info_name="sparkcap")
    names = root.list_commands(ctx)
    assert len(names) >= 10
    for name in names:
        command = root.get_command(ctx, name)
        section = page.split(f"## `sparkcap {name}`\n", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            if param.param_type_name == "argument":
                wanted = [param.name]
            else:
                wanted = [*param.opts, *param.secondary_opts]
            for word in wanted:
                assert f"`{word}" in section or f" {word}" in section, (name, word)


def test_marts_page_describes_every_model_the_yaml_describes() -> None:
    page = (ROOT / "docs" / "reference" / "marts.md").read_text(encoding="utf-8")
    for path in sorted((ROOT / "dbt" / "models").glob("**/_*.yml")):
        for model in yaml.safe_load(path.read_text()).get("models") or []:
            assert f"### `{model['name']}`" in page, (path.name, model["name"])


def test_generation_needs_no_warehouse_and_ignores_terminal_and_folder(tmp_path: Path) -> None:
    """`make test` runs the check on any machine: the pages may depend on the code alone."""
    code = (
        "import sys, json; from sparkcap import docs_reference as d; "
        "pages = {k: f() for k, f in d.PAGES.items()}; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('duckdb', 'prefect')); "
        "print(json.dumps([heavy, pages]))"
    )
    env = {**os.environ, "COLUMNS": "37", "TERM": "dumb", "LANG": "C"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=True,
    )
    heavy, pages = json.loads(done.stdout)
    assert heavy == []
    assert pages == {name: render() for name, render in docs_reference.PAGES.items()}


def test_readme_is_short_and_its_links_lead_into_the_docs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not REMOTE.match(t)]
    assert any(t.startswith("docs/") for t in local)
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing
