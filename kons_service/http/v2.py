"""The Open Inference Protocol (V2, as spoken by KServe, Triton, MLServer and Seldon Core 2): bodies and
tensor decoding. Routes are in :mod:`kons_service.http.routers.v2`.

A kons learner is a V2 model whose input is either one tensor, a batch of rows (shape ``[batch, dim]``,
any of the protocol's numeric datatypes, data flat in row-major order or nested), or several named
inputs, one per feature (shape ``[batch]`` or ``[batch, 1]``, as KServe's and MLServer's clients send a
table's columns), which form a record per row ``{name: value}``: numbers, ``BOOL`` values, and ``BYTES``
strings for categories (a single ``BYTES`` or ``BOOL`` input is a record of one feature too). Its
output is ``prediction`` (``FP64``, shape ``[batch]``); a classifier's are also ``label`` (``BYTES``,
``[batch]``: each row's most probable class, as the v1 API's probabilities key it) and ``probabilities``
(``FP64``, ``[batch, classes]``, the columns named by its parameter ``classes``). Without ``outputs``
in the request every output is answered, else the ones asked for.

Its ``model_version`` is :func:`model_version`, an id of the learner's configuration and of its latest
rollback or promotion: a V2 client pins or compares it, so it must not move with every feedback (the round
count, which does, is the v1 API's ``version``), but it does when the model is replaced by a rollback or a
promotion (docs/lifecycle.md); deleting the learner and creating it with another configuration gives
another one. The
version paths ``/v2/models/{name}/versions/{v}/...`` answer for that version only.
Only JSON tensors are supported, not the binary tensor extension.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Annotated, Any, Self

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    StrictInt,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

import kons
from kons_service.http.schemas import RECORD_MAX_FIELDS, check_record

__all__ = [
    "DATATYPES",
    "INPUT",
    "INTERVAL",
    "LABEL",
    "OUTPUT",
    "OUTPUTS",
    "PROBABILITIES",
    "SET",
    "InferenceRequest",
    "InferenceResponse",
    "ModelMetadata",
    "OutputTensor",
    "ServerMetadata",
    "TensorMetadata",
    "model_version",
    "rows_of",
]

#: The name of a learner's output tensor (and the name its input is described with).
OUTPUT = "prediction"
INPUT = "x"
#: A classifier's outputs besides :data:`OUTPUT`.
LABEL, PROBABILITIES = "label", "probabilities"
#: A learner created with a coverage: its interval (regression, ``FP64 [batch, 2]``) or its prediction set
#: (a classifier, ``BYTES [batch]``: each the JSON list of its classes), at that coverage.
INTERVAL, SET = "interval", "set"
#: Every output a model may be asked for.
OUTPUTS = (OUTPUT, LABEL, PROBABILITIES, INTERVAL, SET)

#: The datatypes of a named input that are not numbers: categories (strings) and booleans.
BYTES, BOOL = "BYTES", "BOOL"
#: The protocol's numeric datatypes and the NumPy type each one's values must fit.
DATATYPES: dict[str, str] = {
    "FP32": "float32", "FP64": "float64",
    "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64",
    "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputTensor(_Body):
    name: str
    shape: list[Annotated[StrictInt, Field(ge=0)]]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: list[Any]


class RequestedOutput(_Body):
    name: str
    parameters: dict[str, Any] | None = None


class InferenceRequest(_Body):
    """``POST /v2/models/{name}/infer``: one input tensor of shape ``[batch, dim]``, or one named input per
    feature.

    The tensors are decoded where the request is validated (by the parser process for a large body, so
    that the serving process never walks their elements); the request then keeps the rows (float64 arrays,
    or records), not the data.
    """

    id: str | None = None
    parameters: dict[str, Any] | None = None
    inputs: Annotated[list[InputTensor], Field(min_length=1, max_length=RECORD_MAX_FIELDS)]
    outputs: list[RequestedOutput] | None = None
    _rows: list[Any] | None = PrivateAttr(None)
    _problem: str | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _decoded(self) -> Self:
        if self._rows is not None or self._problem is not None:
            return self  # an instance validated again (FastAPI, given the parser process's): decoded already
        try:
            self._rows = _decode(self)
        except kons.InvalidInputError as exc:
            self._problem = str(exc)  # raised by rows_of, in the handler, as before
        else:
            self.inputs = [tensor.model_copy(update={"data": []}) for tensor in self.inputs]
        return self


class OutputTensor(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: list[float] | list[str]

    # (not annotated: pydantic would document the return type instead of the model in the OpenAPI schema)
    @model_serializer(mode="wrap")
    def _without_empty_parameters(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """An output without parameters is answered as before outputs could have them."""
        dumped: dict[str, Any] = handler(self)
        if dumped.get("parameters") is None:
            dumped.pop("parameters", None)
        return dumped


class InferenceResponse(BaseModel):
    model_config = ConfigDict(protected_namespaces=())  # model_* are the protocol's names

    model_name: str
    model_version: str
    id: str | None = None
    outputs: list[OutputTensor]


class TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


def model_version(config: dict[str, Any], restored_at: int = 0) -> str:
    """The V2 ``model_version`` of a learner: 12 hex digits of the SHA-256 of its configuration and, after
    a rollback or a promotion, of the version that made the latest one (``restored_at``), the same on
    every replica and across restarts. A learner that never rolled back keeps its configuration's id."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    if restored_at:
        canonical += f"@{restored_at}"
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _flatten(data: list[Any]) -> list[Any]:
    flat: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _values(flat: list[Any], datatype: str) -> np.ndarray:
    """The tensor's values as float64, each checked to be a value of ``datatype``."""
    kind = DATATYPES.get(datatype)
    if kind is None:
        raise kons.InvalidInputError(
            f"datatype {datatype!r} is not supported; use one of {', '.join(DATATYPES)}.")
    if kind.startswith(("int", "uint")):
        info = np.iinfo(kind)
        for i, v in enumerate(flat):
            if type(v) is not int or not info.min <= v <= info.max:
                raise kons.InvalidInputError(f"element {i} ({str(v)[:40]}) is not a {datatype} value.")
        return np.asarray(flat, dtype=np.float64)
    limit = float(np.finfo(kind).max)
    for i, v in enumerate(flat):
        if isinstance(v, bool) or not isinstance(v, int | float) or not abs(v) <= limit:
            raise kons.InvalidInputError(f"element {i} ({str(v)[:40]}) is not a finite {datatype} value.")
    # an FP32 tensor holds float32 values: round them as the client's own float32 array would
    return np.asarray(flat, dtype=kind).astype(np.float64)


def rows_of(request: InferenceRequest) -> list[Any]:
    """The rows of the request's input tensor, decoded when the request was validated; raises the
    problem found then (kons's error, answered as any other once the key and learner name are checked)."""
    if request._problem is not None:
        raise kons.InvalidInputError(request._problem)
    assert request._rows is not None  # set by the validator when there was no problem
    return request._rows


def _decode(request: InferenceRequest) -> list[Any]:
    """The rows of the request: float64 arrays of its one ``[batch, dim]`` tensor, or a record per row of
    its named inputs; after checking its outputs and shapes."""
    for output in request.outputs or ():
        if output.name not in OUTPUTS:
            raise kons.InvalidInputError(
                f"unknown output {output.name!r}: a kons model has {', '.join(map(repr, OUTPUTS))}.")
        if (output.parameters or {}).get("binary_data"):
            raise kons.InvalidInputError("the binary tensor extension is not supported; ask for JSON data.")
    for tensor in request.inputs:
        if (tensor.parameters or {}).get("binary_data_size") is not None:
            raise kons.InvalidInputError("the binary tensor extension is not supported; send JSON data.")
    first = request.inputs[0]
    if len(request.inputs) > 1 or first.datatype in (BYTES, BOOL):
        return _records(request.inputs)
    return list(_dense(first))


def _records(inputs: list[InputTensor]) -> list[dict[str, Any]]:
    """A record per row of named inputs, one feature each (shape ``[batch]`` or ``[batch, 1]``)."""
    names = [tensor.name for tensor in inputs]
    if len(set(names)) != len(names):
        raise kons.InvalidInputError("two inputs have the same name; each input is one feature.")
    columns, batch = [], None
    for tensor in inputs:
        if len(tensor.shape) not in (1, 2) or tensor.shape[1:] not in ([], [1]):
            raise kons.InvalidInputError(
                f"input {tensor.name!r} has shape {tensor.shape}; a named input is one feature: [batch] or "
                "[batch, 1].")
        if batch is None:
            batch = tensor.shape[0]
        elif tensor.shape[0] != batch:
            raise kons.InvalidInputError(
                f"input {tensor.name!r} has {tensor.shape[0]} rows, input {names[0]!r} {batch}.")
        flat = _flatten(tensor.data)
        if len(flat) != batch:
            raise kons.InvalidInputError(
                f"input {tensor.name!r} of shape {tensor.shape} holds {len(flat)} elements, not {batch}.")
        columns.append(_column(tensor, flat))
    if not batch:
        raise kons.InvalidInputError("the inputs are empty.")
    rows = [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
    try:
        for row in rows:
            check_record(row)
    except PydanticCustomError as exc:
        raise kons.InvalidInputError(str(exc)) from None
    return rows


def _column(tensor: InputTensor, flat: list[Any]) -> list[Any]:
    """One feature's values: strings of a ``BYTES`` input, booleans of a ``BOOL`` one, else numbers."""
    wanted = {BYTES: str, BOOL: bool}.get(tensor.datatype)
    if wanted is None:
        return [float(v) for v in _values(flat, tensor.datatype)]
    for i, v in enumerate(flat):
        if type(v) is not wanted:
            raise kons.InvalidInputError(
                f"element {i} of input {tensor.name!r} ({str(v)[:40]}) is not a {tensor.datatype} value.")
    return flat


def _dense(tensor: InputTensor) -> np.ndarray:
    """The one input tensor as float64 rows (``[batch, dim]``)."""
    if len(tensor.shape) != 2:
        raise kons.InvalidInputError(
            f"input {tensor.name!r} has shape {tensor.shape}; a kons model takes [batch, dim].")
    flat = _flatten(tensor.data)
    if len(flat) != math.prod(tensor.shape):
        raise kons.InvalidInputError(
            f"input {tensor.name!r} of shape {tensor.shape} holds {len(flat)} elements, "
            f"not {math.prod(tensor.shape)}.")
    if not flat:
        raise kons.InvalidInputError(f"input {tensor.name!r} is empty.")
    return _values(flat, tensor.datatype).reshape(tensor.shape)
