"""Moving events between processes: the proto codec, frame format and the gRPC client."""
