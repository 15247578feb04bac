"""The token and TLS options every command that talks to (or is) the analyzer takes.

Servers (``diag analyzer``): ``--token-file``, ``--tls-cert``, ``--tls-key``, ``--tls-ca``,
``--insecure``. Clients (``diag run/attach --analyzer``, ``diag daemon``, ``diag profile``,
``diag replay --via-analyzer``): ``--token-file``, ``--tls-ca``, ``--tls-cert``, ``--tls-key``,
each defaulting to its ``DIAG_*`` variable (:mod:`diag.transport.security`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diag.transport.security import ClientSecurity


def add_security_arguments(parser: argparse.ArgumentParser, *, server: bool = False) -> None:
    group = parser.add_argument_group("security (see the README's Security section)")
    who = "require this token on every call" if server else "present this token (DIAG_TOKEN_FILE)"
    group.add_argument("--token-file", metavar="FILE", default=None, help=f"{who}: its first line")
    if server:
        group.add_argument("--tls-cert", metavar="PEM", default=None, help="serve TLS: certificate")
        group.add_argument("--tls-key", metavar="PEM", default=None, help="serve TLS: private key")
        group.add_argument(
            "--tls-ca", metavar="PEM", default=None, help="require client certificates it signed"
        )
        group.add_argument(
            "--insecure",
            action="store_true",
            default=None,
            help="allow a bind beyond loopback without a token (anyone who reaches it can write)",
        )
    else:
        group.add_argument(
            "--tls-ca", metavar="PEM", default=None, help="verify the analyzer's TLS (DIAG_TLS_CA)"
        )
        group.add_argument(
            "--tls-cert", metavar="PEM", default=None, help="client certificate (DIAG_TLS_CERT)"
        )
        group.add_argument(
            "--tls-key", metavar="PEM", default=None, help="client key (DIAG_TLS_KEY)"
        )


def client_security(args: argparse.Namespace) -> ClientSecurity:
    """The client's token and TLS material from ``args`` and the ``DIAG_*`` variables."""
    from diag.transport.security import ClientSecurity

    return ClientSecurity.resolve(
        getattr(args, "token_file", None),
        getattr(args, "tls_ca", None),
        getattr(args, "tls_cert", None),
        getattr(args, "tls_key", None),
    )


def client_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment that hands ``args``' files to a child client (the node daemon)."""
    from diag.transport.security import client_env as env

    return env(
        getattr(args, "token_file", None),
        getattr(args, "tls_ca", None),
        getattr(args, "tls_cert", None),
        getattr(args, "tls_key", None),
    )


def export_client_security(args: argparse.Namespace) -> None:
    """Check ``args``' token and TLS files now (one-line :class:`ConfigError` on a bad one) and
    put them in this process's environment, where every analyzer client it makes, and the node
    daemon it starts, finds them."""
    import os

    client_security(args)
    os.environ.update(client_env(args))
