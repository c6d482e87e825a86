"""The HTTP API reference, read from the gateway's OpenAPI document (the one `/openapi.json`
serves), built from the app with default settings and no connection made."""

import json
from typing import Any

from markdown_table import code, table


def openapi_document() -> dict[str, Any]:
    from gateway.app import create_app
    from gateway.settings import GatewaySettings

    document: dict[str, Any] = create_app(GatewaySettings()).openapi()
    return document


def schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[1]
    if "anyOf" in schema:
        return " or ".join(schema_name(option) for option in schema["anyOf"])
    return str(schema.get("type", "object"))


def operation_section(path: str, method: str, operation: dict[str, Any]) -> str:
    lines = [f"### {method.upper()} `{path}`", ""]
    summary = operation.get("summary", "")
    description = operation.get("description", "")
    lines += [summary, ""] if summary else []
    lines += [description, ""] if description else []
    parameters = [(code(p["name"]), p["in"], "yes" if p.get("required") else "", schema_name(p.get("schema", {})))
                  for p in operation.get("parameters", [])]
    if parameters:
        lines += [table(("parameter", "in", "required", "type"), parameters), ""]
    body = operation.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        schema = content.get("schema", {})
        name = schema_name(schema)
        lines += [f"Body ({media}): " + (f"[{name}](#{name.lower()})" if "$ref" in schema else name), ""]
    responses = [(code(status), answer.get("description", "")) for status, answer in operation.get("responses", {}).items()]
    if responses:
        lines += [table(("status", "meaning"), responses), ""]
    return "\n".join(lines).rstrip()


def schema_section(name: str, schema: dict[str, Any]) -> str:
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    rows = [(code(field), schema_name(spec), "yes" if field in required else "", spec.get("description", ""))
            for field, spec in properties.items()]
    head = f"### {name}\n\n" + (schema.get("description", "") + "\n\n" if schema.get("description") else "")
    return head + (table(("field", "type", "required", "description"), rows) if rows else "")


def http_api_page() -> tuple[str, str]:
    """The page, and the document itself for a download beside it."""
    document = openapi_document()
    operations = [operation_section(path, method, operation)
                  for path, methods in document.get("paths", {}).items() for method, operation in methods.items()]
    schemas = [schema_section(name, schema) for name, schema in document.get("components", {}).get("schemas", {}).items()]
    page = (f"# HTTP API\n\nGenerated at build time from the gateway's OpenAPI document "
            f"({document['info']['title']}, version {document['info']['version']}); the gateway serves it at "
            "`/openapi.json` and its interactive form at `/docs`, both behind a key. The same document: "
            "[openapi.json](openapi.json).\n\n## Routes\n\n" + "\n\n".join(operations)
            + "\n\n## Schemas\n\n" + "\n\n".join(schemas) + "\n")
    return page, json.dumps(document, indent=2)
