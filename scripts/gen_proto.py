"""Regenerate ``diag/proto/diag.proto`` from ``diag/schema.py`` and compile it.

The schema dataclasses are the source of truth; the proto mirrors them field for field (the test
``tests/unit/transport/test_codec.py`` checks the committed files are current). Run after
changing the schema:

    python scripts/gen_proto.py
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diag import schema  # noqa: E402

PROTO_PATH = ROOT / "diag" / "proto" / "diag.proto"

_SCALARS = {int: "int64", float: "double", str: "string", bool: "bool"}
# Column types: packed varints with zigzag for ints (ranks of -1, small deltas stay short).
_COLUMN_TYPES = {"int64": "sint64", "double": "double", "string": "string", "bool": "bool"}
#: suffix of an optional field's absence mask in a columns message (empty: every row present)
ABSENT_SUFFIX = "_absent"

_TAIL = """
// A batch of events: the unit of transport from hook to daemon and daemon to analyzer.
message EventBatch {
  string schema_version = 1;
  string sender = 2;
  int64 sent_ns = 3;
  repeated Event events = 4;
  // The same events by columns (one block per kind, see EventColumns): what a daemon ships to an
  // analyzer that reads them (its schema_version >= COLUMNS_SINCE). A batch may hold both.
  repeated EventColumns columns = 5;
}

// The analyzer's answer to one batch: one reply per batch, never one per event.
message IngestReply {
  int64 num_accepted = 1;
  int64 num_duplicates = 2;
  int64 analyzer_time_ns = 3;
  string schema_version = 4;
}

message TimeRequest {
  int64 client_send_ns = 1;
}

message TimeReply {
  int64 analyzer_time_ns = 1;
  string schema_version = 2;  // the analyzer's; "" from one older than 1.13
}

message SummaryRequest {
  string run_dir = 1;
}

// The run summary (the object `diag report --json` prints), as JSON text.
message SummaryReply {
  string json = 1;
}

// A request for a profiler window on every rank (or on `ranks`) for `num_steps` steps from
// `at_step`. The analyzer fills `request_id`, `seq` and, when 0, `at_step` (a few steps ahead
// of the newest step it has seen, so that every rank gets it in time). `realign_steps` (schema
// 1.19; the analyzer's lead in steps): a rank that gets the request after `at_step` has begun
// takes the window at the first `at_step + k * realign_steps` not yet begun, so the ranks that
// got it late by less than that still share one step; 0: at its next step boundary.
message ProfileRequest {
  string request_id = 1;
  int64 seq = 2;
  int64 at_step = 3;
  int32 num_steps = 4;
  repeated int64 ranks = 5;
  int64 requested_ns = 6;
  int64 expires_ns = 7;
  int32 realign_steps = 8;
}

// A request for one probe from the fixed registry (`probes.PROBES`) on one node: `probe` the
// registry name, `params_json` a JSON object of its typed parameters, `host` the node ("*": every
// node), `device` the CUDA device index ("" or "cpu": the CPU), `rank` the run's rank it stands
// for (-1: none). The analyzer fills `request_id`, `seq`, `requested_ns` and `expires_ns`; the
// node daemon validates it again, runs it in a low-priority subprocess and ships ProbeResult
// events.
message ProbeRequest {
  string request_id = 1;
  int64 seq = 2;
  string probe = 3;
  string params_json = 4;
  string host = 5;
  string device = 6;
  int64 rank = 7;
  int64 requested_ns = 8;
  int64 expires_ns = 9;
}

// A request for the raw collectives a node daemon kept while it shipped CollectiveSummary events
// (schema 1.17): those of `ranks` (empty: every rank of the node) in steps first_step..last_step,
// shipped again as CollectiveEvent rows under the daemon's own source. `host` the node ("*":
// every node). The analyzer fills `request_id`, `seq`, `requested_ns` and `expires_ns`.
message CollectiveFetch {
  string request_id = 1;
  int64 seq = 2;
  string host = 3;
  repeated int64 ranks = 4;
  int64 first_step = 5;
  int64 last_step = 6;
  int64 requested_ns = 7;
  int64 expires_ns = 8;
}

// What flows from the analyzer to the hooks, pulled: daemon <- analyzer (PollControl), then
// hook <- daemon (framed on the hook's own Unix socket connection, read by the hook thread).
message ControlMessage {
  oneof body {
    ProfileRequest profile = 1;
    ProbeRequest probe = 2;  // for the node daemon itself, never relayed to hooks
    CollectiveFetch fetch = 3;  // for the node daemon itself, never relayed to hooks
  }
}

message ControlPoll {
  string host = 1;
  string daemon = 2;
  int64 after_seq = 3;
}

message ControlReply {
  repeated ControlMessage messages = 1;
}

service Analyzer {
  rpc Ingest(EventBatch) returns (IngestReply);
  rpc Time(TimeRequest) returns (TimeReply);
  rpc Summary(SummaryRequest) returns (SummaryReply);
  rpc RequestProfile(ProfileRequest) returns (ProfileRequest);
  rpc PollControl(ControlPoll) returns (ControlReply);
  rpc RequestProbe(ProbeRequest) returns (ProbeRequest);
  rpc RequestFetch(CollectiveFetch) returns (CollectiveFetch);
}
"""


def _proto_type(tp: object) -> tuple[str, bool]:
    """(proto scalar type, optional?) for a dataclass field annotation."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        assert len(args) == 1, tp
        return _SCALARS[args[0]], True
    assert isinstance(tp, type) and tp in _SCALARS, tp
    return _SCALARS[tp], False


def render() -> str:
    lines = [
        "// Generated from diag/schema.py by scripts/gen_proto.py. Do not edit by hand.",
        f"// Schema version {schema.SCHEMA_VERSION}.",
        'syntax = "proto3";',
        "",
        "package diag.v1;",
        "",
        "message Envelope {",
    ]
    hints = typing.get_type_hints(schema.Event)
    for i, name in enumerate(schema.ENVELOPE_FIELDS, start=1):
        ptype, opt = _proto_type(hints[name])
        lines.append(f"  {'optional ' if opt else ''}{ptype} {name} = {i};")
    lines.append("}")
    for cls in schema.EVENT_TYPES.values():
        hints = typing.get_type_hints(cls)
        lines += ["", f"message {cls.__name__} {{"]
        for i, name in enumerate(schema.payload_fields(cls), start=1):
            ptype, opt = _proto_type(hints[name])
            lines.append(f"  {'optional ' if opt else ''}{ptype} {name} = {i};")
        lines.append("}")
    lines += ["", "message Event {", "  Envelope env = 1;", "  oneof payload {"]
    for i, (kind, cls) in enumerate(schema.EVENT_TYPES.items(), start=10):
        lines.append(f"    {cls.__name__} {kind} = {i};")
    lines += ["  }", "}"]
    lines += _columns()
    return "\n".join(lines) + "\n" + _TAIL


def _columns() -> list[str]:
    """One ``<Kind>Columns`` message per kind (the envelope's fields, then the payload's, each a
    repeated column; an optional field also has ``<name>_absent``, empty when every row has it)
    and ``EventColumns``, one block of rows of one kind."""
    env_hints = typing.get_type_hints(schema.Event)
    lines: list[str] = []
    for cls in schema.EVENT_TYPES.values():
        hints = typing.get_type_hints(cls)
        names = [*schema.ENVELOPE_FIELDS, *schema.payload_fields(cls)]
        lines += ["", f"message {cls.__name__}Columns {{"]
        number = 1
        for name in names:
            ptype, opt = _proto_type((env_hints | hints)[name])
            lines.append(f"  repeated {_COLUMN_TYPES[ptype]} {name} = {number};")
            number += 1
            if opt:
                assert name + ABSENT_SUFFIX not in names, name
                lines.append(f"  repeated bool {name}{ABSENT_SUFFIX} = {number};")
                number += 1
        lines.append("}")
    lines += [
        "",
        "// Rows of one kind by columns: every column holds num_rows values (an _absent mask",
        "// num_rows or none).",
        "message EventColumns {",
        "  uint32 num_rows = 1;",
        "  oneof payload {",
    ]
    for i, (kind, cls) in enumerate(schema.EVENT_TYPES.items(), start=10):
        lines.append(f"    {cls.__name__}Columns {kind} = {i};")
    lines += ["  }", "}"]
    return lines


def main() -> None:
    PROTO_PATH.write_text(render())
    from grpc_tools import protoc  # dev-only dependency

    rc = protoc.main(
        [
            "protoc",
            f"-I{ROOT}",
            f"--python_out={ROOT}",
            f"--pyi_out={ROOT}",
            f"--grpc_python_out={ROOT}",
            str(PROTO_PATH.relative_to(ROOT)),
        ]
    )
    if rc != 0:
        raise SystemExit(f"protoc failed with {rc}")
    print(f"wrote {PROTO_PATH.relative_to(ROOT)} and its generated modules")


if __name__ == "__main__":
    _ = dataclasses  # keep import for readers: fields come from dataclasses.fields via schema
    main()
