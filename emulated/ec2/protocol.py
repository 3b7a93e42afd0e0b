"""The EC2 Query protocol, both directions, driven by botocore's service model.

Requests: form fields (``Action=AttachNetworkInterface&DeviceIndex=1&...``,
lists flattened as ``Name.1``, ``Name.1.Key``) become the keyword arguments
boto3 would have taken, by walking the operation's input shape with the same
naming rules botocore's ``EC2Serializer`` uses. Responses: the model's dict is
written as the XML botocore's ``EC2QueryParser`` reads, by walking the output
shape. So the HTTP server is a thin adapter over the one model.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any
from xml.sax.saxutils import escape

import botocore.session
from botocore.model import OperationModel, ServiceModel, Shape, StructureShape

from .errors import Ec2Error

XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/"
API_VERSION = "2016-11-15"


@cache
def service_model() -> ServiceModel:
    return botocore.session.get_session().get_service_model("ec2")


def operation(action: str) -> OperationModel:
    try:
        return service_model().operation_model(action)
    except Exception:
        raise Ec2Error("InvalidAction", f"The action {action} is not valid for this web service.") from None


# ------------------------------------------------------------------ requests


def _query_name(shape: Shape, default: str) -> str:
    ser = shape.serialization
    if "queryName" in ser:
        return str(ser["queryName"])
    if "name" in ser:
        n = str(ser["name"])
        return n[0].upper() + n[1:]
    return default


def parse_request(action: str, form: Mapping[str, str]) -> dict[str, Any]:
    """boto3-style parameters of ``action`` from the flattened query fields."""
    op = operation(action)
    shape = op.input_shape
    if shape is None:
        return {}
    prefixes: set[str] = set()
    for key in form:
        parts = key.split(".")
        for i in range(1, len(parts) + 1):
            prefixes.add(".".join(parts[:i]))
    out = _read(shape, form, "", prefixes)
    return out if isinstance(out, dict) else {}


def _read(shape: Shape, form: Mapping[str, str], prefix: str, prefixes: set[str]) -> Any:
    t = shape.type_name
    if t == "structure":
        assert isinstance(shape, StructureShape)
        out: dict[str, Any] = {}
        for name, member in shape.members.items():
            key = _query_name(member, name)
            p = f"{prefix}.{key}" if prefix else key
            if p not in prefixes:
                continue
            out[name] = _read(member, form, p, prefixes)
        return out
    if t == "list":
        items = []
        i = 1
        while f"{prefix}.{i}" in prefixes:
            items.append(_read(shape.member, form, f"{prefix}.{i}", prefixes))
            i += 1
        return items
    raw = form.get(prefix, "")
    try:
        if t in ("integer", "long"):
            return int(raw)
        if t in ("float", "double"):
            return float(raw)
        if t == "boolean":
            return raw.lower() == "true"
        if t == "timestamp":
            return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise Ec2Error("InvalidParameterValue", f"Value ({raw}) for parameter {prefix} is invalid.") from None
    return raw


# ------------------------------------------------------------------ responses


def _tag(shape: Shape, default: str) -> str:
    return str(shape.serialization.get("name", default))


def _scalar(shape: Shape, v: Any) -> str:
    t = shape.type_name
    if t == "boolean":
        return "true" if v else "false"
    if t == "timestamp":
        if isinstance(v, datetime):
            return v.strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}Z"
        return str(v)
    return escape(str(v))


def _write(shape: Shape, v: Any, tag: str, out: list[str]) -> None:
    t = shape.type_name
    if t == "structure":
        assert isinstance(shape, StructureShape)
        out.append(f"<{tag}>")
        for name, member in shape.members.items():
            if name in v and v[name] is not None:
                _write(member, v[name], _tag(member, name), out)
        out.append(f"</{tag}>")
    elif t == "list":
        member = shape.member
        item = _tag(member, "member")
        out.append(f"<{tag}>")
        for x in v:
            _write(member, x, item, out)
        out.append(f"</{tag}>")
    else:
        out.append(f"<{tag}>{_scalar(shape, v)}</{tag}>")


def render_response(action: str, data: Mapping[str, Any], request_id: str) -> bytes:
    """The XML body EC2 sends for a successful ``action``."""
    op = operation(action)
    out = [
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{XMLNS}">',
        f"<requestId>{request_id}</requestId>",
    ]
    shape = op.output_shape
    if shape is not None:
        assert isinstance(shape, StructureShape)
        for name, member in shape.members.items():
            if name in data and data[name] is not None:
                _write(member, data[name], _tag(member, name), out)
    else:
        out.append("<return>true</return>")
    out.append(f"</{action}Response>")
    return "".join(out).encode()


def render_error(err: Ec2Error, request_id: str) -> bytes:
    """EC2's XML error document."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{escape(err.code)}</Code><Message>{escape(err.message)}</Message>"
        f"</Error></Errors><RequestID>{request_id}</RequestID></Response>"
    ).encode()
