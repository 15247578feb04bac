"""Who may talk to the analyzer: a shared token on every RPC, and TLS (optionally mutual).

The analyzer (``diag analyzer --token-file FILE``) requires ``authorization: Bearer <token>`` in
every call's metadata, compared in constant time (:class:`TokenInterceptor`); a call without it,
or with another token, is answered ``UNAUTHENTICATED`` before any handler runs, so nothing is
stored, issued or read. Clients (the daemon, ``diag run --analyzer``, ``diag attach --analyzer``,
``diag profile``, ``diag replay --via-analyzer``) take the same ``--token-file`` or
``DIAG_TOKEN_FILE`` (:meth:`ClientSecurity.resolve`). The token is the file's first line; a
file that others may read is used with a warning, an empty one is refused.

TLS: the analyzer serves with ``--tls-cert`` and ``--tls-key``; with ``--tls-ca`` it also
requires a client certificate that CA signed (mutual TLS). A client given ``--tls-ca`` (or
``DIAG_TLS_CA``) verifies the analyzer's certificate against it; ``--tls-cert``/``--tls-key``
(``DIAG_TLS_CERT``/``DIAG_TLS_KEY``) are its own certificate for mutual TLS.

A server bound to an address other than loopback without a token refuses to start unless
``insecure`` is asked for (:func:`check_exposure`).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from diag.errors import ConfigError

log = logging.getLogger(__name__)

TOKEN_ENV = "DIAG_TOKEN_FILE"
CA_ENV = "DIAG_TLS_CA"
CERT_ENV = "DIAG_TLS_CERT"
KEY_ENV = "DIAG_TLS_KEY"
#: the metadata key gRPC carries the token in (lower case: gRPC metadata keys are).
AUTH_KEY = "authorization"
MAX_TOKEN_BYTES = 4096
MAX_PEM_BYTES = 1 << 20


def read_token(path: str | Path) -> str:
    """The token in ``path`` (its first line, stripped); :class:`ConfigError` in one line if the
    file cannot be read or holds no token. A file that group or others may read is used with a
    warning (the token is a password)."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(f"token file {p} is not a regular file")
            data = fh.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the token file {p}: {exc.strerror or exc}") from None
    if len(data) > MAX_TOKEN_BYTES:
        raise ConfigError(f"token file {p} is over {MAX_TOKEN_BYTES} bytes: not a token")
    try:
        lines = data.decode("ascii").splitlines()
    except UnicodeDecodeError:
        raise ConfigError(f"token file {p} is not ASCII text") from None
    token = lines[0].strip() if lines else ""
    if not token or not token.isprintable():
        raise ConfigError(f"token file {p} holds no token (the first line is empty)")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("token file %s may be read by others (chmod 600 it)", p)
    return token


def _read_pem(path: str | Path, what: str) -> bytes:
    p = Path(path)
    try:
        with p.open("rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ConfigError(f"{what} {p} is not a regular file")
            data = fh.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {p}: {exc.strerror or exc}") from None
    if len(data) > MAX_PEM_BYTES or b"-----BEGIN " not in data:
        raise ConfigError(f"{what} {p} is not a PEM file")
    return data


def _first(arg: str | None, env: Mapping[str, str], key: str) -> str | None:
    return arg or env.get(key) or None


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """What a client presents: ``token`` (``None``: none) and TLS material (PEM bytes;
    ``ca`` ``None`` with no certificate: a plain channel)."""

    token: str | None = None
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None

    @classmethod
    def resolve(
        cls,
        token_file: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ClientSecurity:
        """From the command line's files, else ``DIAG_TOKEN_FILE``, ``DIAG_TLS_CA``,
        ``DIAG_TLS_CERT``, ``DIAG_TLS_KEY``; :class:`ConfigError` (one line) on a bad file."""
        env = os.environ if env is None else env
        token_path = _first(token_file, env, TOKEN_ENV)
        ca = _first(tls_ca, env, CA_ENV)
        cert = _first(tls_cert, env, CERT_ENV)
        key = _first(tls_key, env, KEY_ENV)
        if bool(cert) != bool(key):
            raise ConfigError("a client certificate needs both --tls-cert and --tls-key")
        return cls(
            token=read_token(token_path) if token_path else None,
            ca=_read_pem(ca, "TLS CA file") if ca else None,
            cert=_read_pem(cert, "TLS certificate") if cert else None,
            key=_read_pem(key, "TLS key") if key else None,
        )

    @property
    def tls(self) -> bool:
        return self.ca is not None or self.cert is not None

    def channel(self, target: str, options: list[tuple[str, Any]]) -> grpc.Channel:
        """A channel to ``target`` that presents this: TLS when there is TLS material, the token
        on every call when there is a token."""
        if self.tls:
            creds = grpc.ssl_channel_credentials(
                root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
            )
            channel = grpc.secure_channel(target, creds, options=options)
        else:
            channel = grpc.insecure_channel(target, options=options)
        if self.token is not None:
            channel = grpc.intercept_channel(channel, _TokenMetadata(self.token))
        return channel


class _TokenMetadata(grpc.UnaryUnaryClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every unary call."""

    def __init__(self, token: str) -> None:
        self._entry = (AUTH_KEY, f"Bearer {token}")

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        metadata = [*(client_call_details.metadata or ()), self._entry]
        return continuation(_Details(client_call_details, metadata), request)


class _Details(grpc.ClientCallDetails):
    def __init__(self, base: Any, metadata: list[tuple[str, str]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


@dataclass(frozen=True, slots=True)
class ServerSecurity:
    """What the analyzer requires: ``token`` on every call (``None``: none) and TLS (``cert``
    and ``key``; ``ca``: require client certificates signed by it)."""

    token: str | None = None
    cert: bytes | None = None
    key: bytes | None = None
    ca: bytes | None = None

    @classmethod
    def from_files(
        cls,
        token_file: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_ca: str | None = None,
    ) -> ServerSecurity:
        """:class:`ConfigError` (one line) on a bad file or an incomplete TLS setting."""
        if bool(tls_cert) != bool(tls_key):
            raise ConfigError("TLS needs both --tls-cert and --tls-key")
        if tls_ca and not tls_cert:
            raise ConfigError("--tls-ca (client certificates) needs --tls-cert and --tls-key")
        return cls(
            token=read_token(token_file) if token_file else None,
            cert=_read_pem(tls_cert, "TLS certificate") if tls_cert else None,
            key=_read_pem(tls_key, "TLS key") if tls_key else None,
            ca=_read_pem(tls_ca, "TLS CA file") if tls_ca else None,
        )

    @property
    def tls(self) -> bool:
        return self.cert is not None

    def interceptors(self) -> tuple[grpc.ServerInterceptor, ...]:
        return (TokenInterceptor(self.token),) if self.token is not None else ()

    def add_port(self, server: grpc.Server, bind: str) -> int:
        """Bind ``bind`` on ``server``, with TLS when configured; the port (0: not bound)."""
        if not self.tls:
            return int(server.add_insecure_port(bind))
        assert self.cert is not None and self.key is not None
        creds = grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.ca, require_client_auth=bool(self.ca)
        )
        return int(server.add_secure_port(bind, creds))


class TokenInterceptor(grpc.ServerInterceptor):
    """Answers ``UNAUTHENTICATED`` to every call without the token, before its handler runs."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "a valid diag token is required")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(
        self, continuation: Callable[[Any], Any], handler_call_details: Any
    ) -> Any:
        given = b""
        for key, value in handler_call_details.invocation_metadata or ():
            if key == AUTH_KEY:
                given = value.encode() if isinstance(value, str) else bytes(value)
                break
        if hmac.compare_digest(given, self._expected):
            return continuation(handler_call_details)
        log.warning("refused an unauthenticated call to %s", handler_call_details.method)
        return self._deny


def client_env(
    token_file: str | None = None,
    tls_ca: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> dict[str, str]:
    """The environment that hands these files to a child client (the node daemon ``diag run``
    starts), as absolute paths."""
    pairs = ((TOKEN_ENV, token_file), (CA_ENV, tls_ca), (CERT_ENV, tls_cert), (KEY_ENV, tls_key))
    return {k: str(Path(v).resolve()) for k, v in pairs if v}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (as in a bind address: ``[::1]``, ``localhost``) is the loopback."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(bind: str, security: ServerSecurity, insecure: bool) -> None:
    """:class:`ConfigError` when ``bind`` is reachable from other machines without a token
    and ``insecure`` was not given (anyone who reaches the port could forge events)."""
    host = bind.rsplit(":", 1)[0]
    if is_loopback(host) or security.token is not None or insecure:
        return
    raise ConfigError(
        f"binding {bind} without a token would let any machine that reaches it store events "
        "and issue requests: give --token-file FILE (and --tls-cert/--tls-key), or --insecure"
    )


__all__ = [
    "AUTH_KEY",
    "CA_ENV",
    "CERT_ENV",
    "KEY_ENV",
    "TOKEN_ENV",
    "ClientSecurity",
    "ServerSecurity",
    "TokenInterceptor",
    "check_exposure",
    "client_env",
    "is_loopback",
    "read_token",
]
