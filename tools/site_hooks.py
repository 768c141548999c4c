"""MkDocs hooks of the documentation site (mkdocs.yml): the README is the home page, the
changelog and the licence are pages, and links from the docs to files of the repository
outside docs/ lead to copies of those files in the site, so every link of the README and of
the docs works on the site as it does on a checkout.

Links are rewritten in the Markdown before it is rendered: on the home page `docs/X` becomes
`X`; anywhere, a relative link whose target is a file or directory of the repository outside
docs/ becomes a link to `source/<path>` (a file's copy, or a page listing a directory).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "source"  # where the copies of repository files live in the site
# [text](target) and ![alt](target), target without a scheme or an anchor-only link
_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
_GENERATED = {
    "index.md": "README.md",
    "changelog.md": "CHANGELOG.md",
}
_SKIP = ("http://", "https://", "mailto:", "#", "/")


def _split(target: str) -> tuple[str, str]:
    path, hash_, anchor = target.partition("#")
    return path, hash_ + anchor


class _Links:
    """Rewrites the links of one page and remembers the repository paths it pointed at."""

    def __init__(self, page_src: str, docs_dir: Path, repo_path: Path) -> None:
        self.page_src = page_src  # the page's path in the site (docs_dir relative)
        self.docs_dir = docs_dir
        self.repo_path = repo_path  # where the page's text lives in the repository
        self.wanted: set[str] = set()

    def __call__(self, m: re.Match[str]) -> str:
        target = m.group(2)
        if target.startswith(_SKIP) or ":" in target.split("/", 1)[0]:
            return m.group(0)
        path, anchor = _split(target)
        resolved = (self.repo_path.parent / path).resolve()
        try:
            in_docs = resolved.relative_to(self.docs_dir.resolve()).as_posix()
        except ValueError:
            in_docs = None
        if in_docs is not None:
            new = in_docs
        else:
            try:
                rel = resolved.relative_to(ROOT).as_posix()
            except ValueError:
                return m.group(0)  # outside the repository: left for the link check
            if not resolved.exists():
                return m.group(0)
            back = {v: k for k, v in _GENERATED.items()}
            if rel in back:
                new = back[rel]
            elif rel == "LICENSE":
                new = "license.md"
            else:
                self.wanted.add(rel)
                new = _page_of(rel)
        here = posixpath.dirname(self.page_src)
        return f"{m.group(1)}{posixpath.relpath(new, here or '.')}{anchor}{m.group(3)}"


_WANTED: set[str] = set()


def _rewrite(markdown: str, page_src: str, docs_dir: Path, repo_path: Path) -> str:
    links = _Links(page_src, docs_dir, repo_path)
    # leave fenced code alone: links there are text
    parts = re.split(r"(^```.*?^```)", markdown, flags=re.M | re.S)
    for i in range(0, len(parts), 2):
        parts[i] = _LINK.sub(links, parts[i])
    _WANTED.update(links.wanted)
    return "".join(parts)


def _page_of(rel: str) -> str:
    """The site page that shows the repository path `rel`."""
    path = ROOT / rel
    if path.is_dir():
        return f"{SOURCE}/{rel}/index.md"
    return f"{SOURCE}/{rel}" + ("" if path.suffix == ".md" else ".md")


def _shown(path: Path) -> bool:
    return not path.name.startswith((".", "__pycache__")) and path.suffix != ".pyc"


def _listing(rel: str) -> str:
    d = ROOT / rel
    rows = [
        f"- [`{p.name}{'/' if p.is_dir() else ''}`]"
        f"({posixpath.relpath(_page_of(f'{rel}/{p.name}'), f'{SOURCE}/{rel}')})"
        for p in sorted(d.iterdir())
        if _shown(p)
    ]
    return f"# `{rel}/`\n\nFiles of the repository's `{rel}` directory.\n\n" + "\n".join(rows)


def _source_files(config: Any, files: Files, rel: str) -> None:
    """Add `source/<rel>` (and, for a directory, everything below it) to the site."""
    path = ROOT / rel
    if path.is_dir():
        _add(files, config, f"{SOURCE}/{rel}/index.md", _listing(rel))
        for child in sorted(path.iterdir()):
            if _shown(child):
                _source_files(config, files, f"{rel}/{child.name}")
    elif path.suffix == ".md":
        text = _rewrite(path.read_text(), f"{SOURCE}/{rel}", Path(config["docs_dir"]), path)
        _add(files, config, f"{SOURCE}/{rel}", text)
    else:
        lang = {".py": "python", ".toml": "toml", ".json": "json", ".html": "html",
                ".yaml": "yaml", ".yml": "yaml"}.get(path.suffix, "")  # fmt: skip
        body = path.read_text(errors="replace")
        fence = "````" if "```" in body else "```"
        _add(files, config, f"{SOURCE}/{rel}.md", f"# `{rel}`\n\n{fence}{lang}\n{body}\n{fence}\n")


def _add(files: Files, config: Any, src_uri: str, content: str, in_nav: bool = False) -> None:
    if files.get_file_from_path(src_uri) is None:
        level = InclusionLevel.UNDEFINED if in_nav else InclusionLevel.NOT_IN_NAV
        files.append(File.generated(config, src_uri, content=content, inclusion=level))


def on_files(files: Files, config: Any) -> Files:
    """The home page, the changelog and the licence, as pages."""
    docs_dir = Path(config["docs_dir"])
    for page, source in _GENERATED.items():
        text = _rewrite((ROOT / source).read_text(), page, docs_dir, ROOT / source)
        _add(files, config, page, text, in_nav=True)
    licence = (ROOT / "LICENSE").read_text()
    _add(files, config, "license.md", f"# License\n\n```text\n{licence}\n```\n", in_nav=True)
    # the pages of docs/ link to repository files: collect them now, before the nav is built
    for f in list(files):
        if f.src_uri.endswith(".md") and f.abs_src_path and not f.generated_by:
            _rewrite(Path(f.abs_src_path).read_text(), f.src_uri, docs_dir, Path(f.abs_src_path))
    for rel in sorted(_WANTED):
        _source_files(config, files, rel)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Links of the docs' pages to repository files lead to their copies in the site."""
    f = page.file
    if f.generated_by or not f.abs_src_path:
        return markdown
    return _rewrite(markdown, f.src_uri, Path(config["docs_dir"]), Path(f.abs_src_path))
