"""MkDocs hooks: the site's pages that are generated rather than written.

``reference/http.md`` is rendered from the OpenAPI document of the FastAPI app
that ``bridge serve`` runs, and ``reference/openapi.json`` is that document, so
the HTTP reference cannot drift from the routes. The page is plain Markdown: it
needs no script and no other host to be read.

Headings get the anchors GitHub gives them, so that a link between two pages
works both in the site and where the repository is browsed.

``benchmarks.md`` is ``bench/README.md``, which is written to be read beside the
scripts: in the site its links to the docs point at their pages, and its links
to a script show the script's name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]

#: The order of the HTTP reference's sections, by OpenAPI tag.
TAGS = ("schedules", "calendars", "runs", "incidents", "audit", "scheduler")


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Give the table of contents GitHub's anchors."""
    config.mdx_configs.setdefault("toc", {})["slugify"] = github_anchor
    return config


def github_anchor(heading: str, separator: str) -> str:
    """The anchor GitHub gives ``heading`` (its text, markup removed): lower case, without
    punctuation, each space a separator; unlike Python-Markdown's, runs of ``-`` stay."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", separator)


#: A Sphinx role before a code span, as the docstrings write cross-references
#: (``:class:`~bridge.errors.RunSkipped```), which mkdocstrings leaves as it is.
ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc):<code>(~[\w.]*\.)?")


def on_page_content(html: str, **_: Any) -> str:
    """The docstrings' cross-references as plain code: no role, and ``~`` keeps the last name."""
    return ROLE.sub("<code>", html)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated pages to the site's files."""
    spec = openapi()
    generated = {
        "reference/http.md": http_reference(spec),
        "reference/openapi.json": json.dumps(spec, indent=2) + "\n",
        "benchmarks.md": benchmarks((ROOT / "bench" / "README.md").read_text(encoding="utf-8")),
        # The changelog lives at the root, where packagers and readers of the repository look.
        "changelog.md": (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"),
    }
    for path, content in generated.items():
        files.append(File.generated(config, path, content=content))
    return files


def openapi() -> dict[str, Any]:
    """The OpenAPI document of ``bridge serve``'s app; an in-memory database is never read."""
    from bridge import Bridge
    from bridge.manage.web.app import create_app

    spec: dict[str, Any] = create_app(bridge=Bridge(database_url="sqlite://")).openapi()
    return spec


def http_reference(spec: dict[str, Any]) -> str:
    """Every operation of ``spec``, by tag: its parameters, its body's fields, its answers."""
    schemas = spec["components"]["schemas"]
    out = [
        "# HTTP endpoints",
        "",
        "Generated from the OpenAPI document of `celery -A APP bridge serve` "
        f"(OpenAPI {spec['openapi']}, version {spec['info']['version']}), which the "
        "server also serves at `/openapi.json`, with an interactive page at `/docs`. "
        "The same document: [openapi.json](openapi.json). How to use the API, its "
        "tokens, errors and metrics: [the HTTP API guide](../http.md).",
        "",
        _text(spec["info"]["description"]),
        "",
    ]
    operations = [
        (method, path, operation)
        for path, methods in spec["paths"].items()
        for method, operation in methods.items()
    ]
    for tag in TAGS:
        out += [f"## {tag.capitalize()}", ""]
        for method, path, operation in operations:
            if operation.get("tags", [None])[0] == tag:
                out += _operation(method, path, operation, schemas)
    untagged = [op for op in operations if op[2].get("tags", [None])[0] not in TAGS]
    if untagged:
        raise ValueError(f"operations without a section: {[op[:2] for op in untagged]}")
    return "\n".join(out) + "\n"


def _operation(
    method: str, path: str, operation: dict[str, Any], schemas: dict[str, Any]
) -> list[str]:
    out = [f"### `{method.upper()} {path}`", "", _text(operation.get("description", "")), ""]
    token = "the read or admin token" if method == "get" else "the admin token"
    out += [f"Needs {token}." if operation.get("security") else "Needs no token.", ""]
    parameters = operation.get("parameters", [])
    if parameters:
        out += ["| parameter | in | type | default | description |", "|---|---|---|---|---|"]
        for parameter in parameters:
            schema = parameter.get("schema", {})
            required = " (required)" if parameter.get("required") else ""
            out.append(
                f"| `{parameter['name']}`{required} | {parameter['in']} | {_type(schema)} "
                f"| {_default(schema)} | {_cell(parameter.get('description', ''))} |"
            )
        out.append("")
    body = operation.get("requestBody")
    if body:
        out += _body(body, schemas)
    out += ["| answer | when |", "|---|---|"]
    for status, response in operation["responses"].items():
        out.append(f"| `{status}` | {_cell(response.get('description', ''))} |")
    out.append("")
    return out


def _body(body: dict[str, Any], schemas: dict[str, Any]) -> list[str]:
    """The fields of a JSON request body, from its component schema.

    FastAPI declares an optional body as ``anyOf`` the schema and ``null``.
    """
    schema = body["content"]["application/json"]["schema"]
    [ref] = [choice["$ref"] for choice in schema.get("anyOf", [schema]) if "$ref" in choice]
    resolved = schemas[ref.rsplit("/", 1)[-1]]
    required = set(resolved.get("required", []))
    out = [
        "Body: a JSON object."
        if body.get("required")
        else "Body (may be left out): a JSON object.",
        "",
        "| field | type | default | description |",
        "|---|---|---|---|",
    ]
    for field, spec in resolved.get("properties", {}).items():
        mark = " (required)" if field in required else ""
        out.append(
            f"| `{field}`{mark} | {_type(spec)} | {_default(spec)} "
            f"| {_cell(spec.get('description', ''))} |"
        )
    return [*out, ""]


def _type(schema: dict[str, Any]) -> str:
    """A JSON schema's type in words: ``string``, ``array of string``, ``object or string``."""
    if "anyOf" in schema:
        kinds = [_type(choice) for choice in schema["anyOf"] if choice.get("type") != "null"]
        return " or ".join(dict.fromkeys(kinds))
    kind = str(schema.get("type", "any"))
    if kind == "array" and "items" in schema:
        return f"array of {_type(schema['items'])}"
    if "format" in schema:
        return f"{kind} ({schema['format']})"
    return kind


def _default(schema: dict[str, Any]) -> str:
    return f"`{schema['default']}`" if "default" in schema else ""


def _cell(text: str) -> str:
    """``text`` on one line of a table cell, its ``<ISO time>`` shown rather than read as HTML."""
    return _text(" ".join(text.split()).replace("|", "\\|"))


def _text(text: str) -> str:
    """``text`` as Markdown shows it: a ``<`` outside code as itself, not as a tag."""
    parts = CODE.split(text)
    # Odd parts are the code spans, which Markdown shows as they are.
    return "".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts))


#: A Markdown code span.
CODE = re.compile(r"(`+[^`]*`+)")


#: A Markdown link, as bench/README.md writes them: its text, and its target.
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")


def benchmarks(readme: str) -> str:
    """``bench/README.md`` with each link to another file made one the site can follow."""

    def relink(found: re.Match[str]) -> str:
        text, target = found.groups()
        if target.startswith("../docs/"):
            return f"[{text}]({target.removeprefix('../docs/')})"
        if target.startswith(("#", "http://", "https://")):
            return found.group(0)
        # A script of bench/: its name, which the link's text shows already.
        return text

    return LINK.sub(relink, readme)
