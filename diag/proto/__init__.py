"""Generated protobuf and gRPC code for the wire (``scripts/gen_proto.py`` writes ``diag.proto``
from :mod:`diag.schema`). Imports nothing of diag."""
