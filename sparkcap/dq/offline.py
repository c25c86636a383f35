"""Make GX Data Docs open from disk: copy vendored assets in, rewrite the CDN links.

The pages are published with the report and read on machines that may have no network, so
every stylesheet, script and font they load must sit next to them.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

VENDOR = Path(str(files("sparkcap").joinpath("data/vendor")))

# CDN URL (prefix match) -> file under the vendored folder
CDN_MAP: dict[str, str] = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": "css/bootstrap.min.css",
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": "js/bootstrap.min.js",
    "https://code.jquery.com/jquery-3.7.1.min.js": "js/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": "js/popper.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": "css/fontawesome-all.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": "css/bootstrap-table.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": "js/bootstrap-table.min.js",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/"
    "bootstrap-table-filter-control.min.js": "js/bootstrap-table-filter-control.min.js",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/"
    "bootstrap-table-filter-control.min.css": "css/bootstrap-table-filter-control.min.css",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/"
    "bootstrap-table-filter-control.css": "css/bootstrap-table-filter-control.css",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/"
    "bootstrap-datepicker.min.css": "css/bootstrap-datepicker.min.css",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/"
    "bootstrap-datepicker.min.js": "js/bootstrap-datepicker.min.js",
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/"
    "bootstrap-prefers-dark.css": "css/bootstrap-prefers-dark.css",
    "https://cdn.jsdelivr.net/npm/vega@5": "js/vega.min.js",
    "https://cdn.jsdelivr.net/npm/vega-lite@5": "js/vega-lite.min.js",
    "https://cdn.jsdelivr.net/npm/vega-embed@6": "js/vega-embed.min.js",
}
_RESOURCE = re.compile(r'((?:src|href)\s*=\s*["\'])(https?://[^"\']+)(["\'])')


_IMG_REMOTE = re.compile(r'(<img\b[^>]*?)\bsrc\s*=\s*"https?://[^"]*"', re.S)
_CSS_REMOTE = re.compile(r"""url\(\s*['"]?https?://[^)'"]*['"]?\s*\)""")
_TAG = re.compile(r"<(?:script|link)\b[^>]*>", re.S)
_CORS_ATTRS = re.compile(
    r"""\s(?:crossorigin|integrity)(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s>]+))?""", re.S
)


def _strip_cors(new_tag: str, old_tag: str) -> str:
    """A rewritten tag loses ``crossorigin``/``integrity``: from file:// they block loading."""
    if new_tag == old_tag:
        return new_tag
    return _CORS_ATTRS.sub("", new_tag)


def _local_img(src: str) -> Callable[[re.Match[str]], str]:
    def repl(m: re.Match[str]) -> str:
        return f'{m.group(1)}src="{src}"'

    return repl


def make_offline(site_dir: Path) -> list[Path]:
    """Rewrite every HTML page under ``site_dir``; return the pages changed."""
    target = site_dir / "static" / "vendor"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(VENDOR, target, ignore=shutil.ignore_patterns("README.md", "licenses"))
    shutil.copytree(VENDOR / "licenses", target / "licenses")
    changed = []
    for page in site_dir.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        rel = os.path.relpath(target, page.parent).replace(os.sep, "/")

        def swap(m: re.Match[str], rel: str = rel) -> str:
            url = m.group(2)
            local = CDN_MAP.get(url)
            if local is None:
                return m.group(0)
            return f"{m.group(1)}{rel}/{local}{m.group(3)}"

        new = _TAG.sub(lambda m: _strip_cors(_RESOURCE.sub(swap, m.group(0)), m.group(0)), text)
        # GX's logo <img> is fetched from a remote bucket with the context id in its query
        # string (a tracking pixel): point it at the logo shipped in the site instead
        logo = os.path.relpath(
            site_dir / "static" / "images" / "logo-long-vector.svg", page.parent
        ).replace(os.sep, "/")
        new = _IMG_REMOTE.sub(_local_img(logo), new)
        new = _CSS_REMOTE.sub("none", new)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def remote_resources(page: Path) -> list[str]:
    """Scripts, stylesheets, images and CSS urls a page would still fetch from the network."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in re.finditer(r"<(script|link|img)\b[^>]*>", text, re.S):
        tag = m.group(0)
        src = re.search(r'(?:src|href)\s*=\s*["\'](https?://[^"\']+)', tag)
        if src and (m.group(1) in ("script", "img") or "stylesheet" in tag):
            out.append(src.group(1))
    out += [m.group(0) for m in _CSS_REMOTE.finditer(text)]
    return out
