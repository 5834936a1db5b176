# -*- test-case-name: tests.api.test_openapi -*-
"""
The OpenAPI 3.1 document, generated from the route table and the attrs
models (never written by hand).
"""

from __future__ import annotations

import types
import typing
from datetime import datetime
from typing import Any, Iterable

import attrs

from .. import __version__
from .models.meta import ErrorResponse
from .query import parameters as query_parameters
from .routing import PATH_KINDS, Route

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer", "format": "int64"},
    bool: {"type": "boolean"},
    float: {"type": "number"},
    datetime: {"type": "string", "format": "date-time"},
}


def _schema(kind: Any, components: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The JSON schema of a Python type, and whether ``None`` is allowed."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(kind) if a is not type(None)]
        schema, _ = _schema(members[0], components)
        return schema, True
    if origin in (list, tuple):
        item = typing.get_args(kind)[0]
        return {"type": "array", "items": _schema(item, components)[0]}, False
    if origin is dict:
        value = typing.get_args(kind)[1]
        return {"type": "object", "additionalProperties": _schema(value, components)[0]}, False
    if attrs.has(kind):
        return {"$ref": f"#/components/schemas/{model_schema(kind, components)}"}, False
    return dict(_SCALARS.get(kind, {})), False


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or ``null``."""
    kind = schema.get("type")
    if isinstance(kind, str) and "enum" not in schema:
        return {**schema, "type": [kind, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def model_schema(model: type, components: dict[str, Any]) -> str:
    """Add ``model`` (an attrs class) to ``components`` and return its name."""
    name = model.__name__
    if name in components:
        return name
    components[name] = {}
    hints = typing.get_type_hints(model)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in attrs.fields(model):
        schema, nullable = _schema(hints[field.name], components)
        # Constraints the input parser enforces beyond the type (see models/fields.py).
        schema = {**schema, **field.metadata.get("schema", {})}
        # An optional field may be null: the input parsers take null as "not given".
        properties[field.name] = _or_null(schema) if nullable else schema
        if field.default is attrs.NOTHING and not nullable:
            required.append(field.name)
    components[name] = {
        "type": "object",
        "description": (model.__doc__ or "").strip().split("\n\n")[0],
        "properties": properties,
        "required": required,
        "additionalProperties": False,
        # Rules between fields the parser enforces (e.g. one field or another, not both).
        **getattr(model, "__json_schema__", {}),
    }
    return name


def _operation(route: Route, method: str, components: dict[str, Any]) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": route.operation_id + ("_head" if method != route.method else ""),
        "summary": route.summary,
        "tags": [route.tag],
    }
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": PATH_KINDS[name].schema()}
        for name in _path_names(route.path)
    ]
    for name, kind, description, required, repeated in query_parameters(route.query):
        schema = kind.schema()
        if repeated:
            schema = {"type": "array", "items": schema, **({"minItems": 1} if required else {})}
        elif kind.empty_is_absent and not required:
            # ``name=`` is taken as not given (the default), as HTML forms send an empty field.
            schema = {"anyOf": [schema, {"type": "string", "maxLength": 0}]}
        parameters.append(
            {"name": name, "in": "query", "required": required, "description": description,
             "schema": schema, **({"explode": True} if repeated else {})}
        )
    if parameters:
        operation["parameters"] = parameters
    if route.body is not None and method == route.method:
        body_name = model_schema(route.body, components)
        operation["requestBody"] = {
            "required": _needs_fields(components[body_name]),
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body_name}"}}},
        }
    responses: dict[str, Any] = {}
    for status, reply in sorted(route.replies.items()):
        entry: dict[str, Any] = {"description": reply.description}
        if method == "HEAD":
            responses[str(status)] = entry
            continue
        if reply.model is not None:
            ref = {"$ref": f"#/components/schemas/{model_schema(reply.model, components)}"}
            entry["content"] = {
                reply.media or "application/json": {"schema": {"type": "array", "items": ref} if reply.array else ref}
            }
        elif reply.media is not None:
            entry["content"] = {media: {"schema": _unmodelled(media)} for media in (reply.media, *reply.also)}
        responses[str(status)] = entry
    error_ref = {"$ref": f"#/components/schemas/{model_schema(ErrorResponse, components)}"}
    responses["default"] = {
        "description": "An error (400, 401, 403, 404, 405, 408, 409, 413, 421, 500, 501, 503, 507 ...)",
        "content": {"application/json": {"schema": error_ref}},
    }
    if not route.public:
        operation["security"] = [{"bearer": []}]
    operation["responses"] = responses
    return operation


#: One Server-Sent Event as the OpenAPI 3.1 readers take the schema of an
#: event stream: an object per event, whose ``data`` is one line of JSON.
SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": {"type": "object"}},
    },
    "required": ["data"],
}


def _needs_fields(schema: dict[str, Any]) -> bool:
    """
    Whether a body of ``schema`` must be sent: it requires a field (or each
    of its alternatives does); else no body means every field's default.
    """
    alternatives = schema.get("anyOf")
    if alternatives:
        return all(_needs_fields(alternative) for alternative in alternatives)
    return bool(schema.get("required"))


def _unmodelled(media: str) -> dict[str, Any]:
    """The schema of a body of ``media`` that has no model: what a reader can check of it."""
    if media == "text/event-stream":
        return SSE_EVENT
    if media == "application/json":
        return {"type": "object"}
    return {"type": "string"}


def _path_names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def openapi_document(routes: Iterable[Route]) -> dict[str, Any]:
    """Build the OpenAPI 3.1 document describing ``routes``."""
    components: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for route in routes:
        item = paths.setdefault(route.path, {})
        item[route.method.lower()] = _operation(route, route.method, components)
        if route.head:
            item["head"] = _operation(route, "HEAD", components)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "vmservice",
            "version": __version__,
            "description": "Boots and manages micro-VMs on a Linux host.",
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
