"""Moving events between processes: the proto codec (:mod:`.codec`, schema <-> proto), the
length-prefixed frames on the hooks' Unix sockets (:mod:`.framing`), the analyzer's gRPC client
(:mod:`.client`) and an in-process stand-in for a daemon (:mod:`.local`).

May import: the contracts and :mod:`diag.proto` (grpc only in :mod:`.client`, which the hook
never imports).
"""
