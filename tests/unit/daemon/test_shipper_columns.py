"""The shipper sends by columns only to an analyzer that reads them, and sends the same batch again
as rows when a reply shows an older analyzer (that skipped the columns) took its place."""

from __future__ import annotations

from pathlib import Path

from diag import schema
from diag.daemon.shipper import Shipper
from diag.daemon.spool import Spool
from diag.proto import diag_pb2 as pb
from diag.transport import codec
from tests.fakes.events import Source, batch


class Client:
    """Records what it is sent; answers with ``versions`` in turn (the last one repeats)."""

    target = "analyzer:1"

    def __init__(self, known: str, versions: list[str]) -> None:
        self.analyzer_version = known
        self.versions = versions
        self.sent: list[pb.EventBatch] = []

    def ingest(self, payload: bytes) -> pb.IngestReply:
        self.sent.append(pb.EventBatch.FromString(payload))
        version = self.versions.pop(0) if len(self.versions) > 1 else self.versions[0]
        self.analyzer_version = version
        return pb.IngestReply(schema_version=version)


def _shipper(tmp_path: Path, client: Client) -> Shipper:
    return Shipper(Spool(tmp_path / "spool"), client, on_clock=lambda o, r: None)  # type: ignore[arg-type]


def _payload() -> bytes:
    src = Source(rank=0)
    return batch([src.step(0), src.collective(0), src.step(1)]).SerializeToString()


def test_an_analyzer_that_reads_columns_gets_one_batch_of_blocks(tmp_path: Path) -> None:
    client = Client(schema.SCHEMA_VERSION, [schema.SCHEMA_VERSION])
    shipper = _shipper(tmp_path, client)
    shipper._send(_payload())
    [sent] = client.sent
    assert not sent.events and [b.num_rows for b in sent.columns] == [2, 1]
    assert shipper.num_sent_columns == 1


def test_an_older_analyzer_gets_rows(tmp_path: Path) -> None:
    client = Client("", [""])
    _shipper(tmp_path, client)._send(_payload())
    [sent] = client.sent
    assert len(sent.events) == 3 and not sent.columns


def test_a_downgraded_analyzer_gets_the_batch_again_as_rows(tmp_path: Path) -> None:
    client = Client(schema.SCHEMA_VERSION, ["1.12", "1.12"])
    shipper = _shipper(tmp_path, client)
    shipper._send(_payload())
    first, second = client.sent
    assert first.columns and not first.events
    assert len(second.events) == 3 and not second.columns
    assert codec.events_from_batch(first) != [] and shipper.num_sent_columns == 0
    shipper._send(_payload())  # the reply said 1.12: no more columns
    assert len(client.sent) == 3 and not client.sent[2].columns


def test_a_batch_that_does_not_parse_goes_as_it_is(tmp_path: Path) -> None:
    client = Client(schema.SCHEMA_VERSION, [schema.SCHEMA_VERSION])

    class Raw(Client):
        def ingest(self, payload: bytes) -> pb.IngestReply:
            self.raw = payload
            return pb.IngestReply(schema_version=schema.SCHEMA_VERSION)

    raw = Raw(schema.SCHEMA_VERSION, [schema.SCHEMA_VERSION])
    _shipper(tmp_path, raw)._send(b"\xff\xff not a batch")
    assert raw.raw == b"\xff\xff not a batch" and not client.sent
