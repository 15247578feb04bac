"""The record of automatic deep captures: ``RUN_DIR/auto_capture.jsonl``, one JSON object a line.

The analyzer's closed loop (:mod:`diag.analyzer.autocapture`) appends a :class:`Capture` each time
it asks for evidence by itself (``status`` ``requested``), would have asked in ``observe`` mode
(``observed``), was held back by its budget (``deferred``), or saw what the evidence decided
(``decided``, with ``outcome``). ``diag triage`` reads it back (:func:`read`) to show each
finding the evidence the loop fetched for it (:mod:`diag.diagnose.capture_evidence`).

The file is append-only and written whole a line at a time; a line that is not a capture (a torn
last line after a crash, a hand edit) is skipped and named in the problems :func:`read` returns,
never a traceback.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CAPTURES_FILE = "auto_capture.jsonl"
STATUSES = ("requested", "observed", "deferred", "decided")
#: Longest file read back (a record is ~400 bytes; a job asks at most once every 2 minutes).
MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class Capture:
    """One step of the closed loop for one finding.

    ``finding_id``: the finding that lacked evidence; ``kind``: what was asked for
    (``profile``: a profiler window); ``ranks``: its suspects, ``peers``: the healthy ranks of
    their work class profiled beside them; ``after_step``: the anomaly's onset, the step the
    evidence had to come after; ``at_step``: the step the window was asked for (-1: the control
    board's next step); ``request_id``: the control request's id ("" when none was sent);
    ``outcome``: for ``decided``, what the evidence said (``kernel <name>`` or ``node``)."""

    ts_ns: int
    status: str
    finding_id: str
    kind: str
    reason: str
    ranks: tuple[int, ...]
    peers: tuple[int, ...] = ()
    after_step: int = -1
    at_step: int = -1
    request_id: str = ""
    outcome: str = ""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ranks"], out["peers"] = list(self.ranks), list(self.peers)
        return out

    @classmethod
    def from_json(cls, d: Any) -> Capture:
        """A capture from :meth:`to_json`'s object; ``ValueError`` naming what is wrong."""
        if not isinstance(d, dict):
            raise ValueError("not an object")

        def text(key: str, default: str | None = None) -> str:
            v = d.get(key, default)
            if not isinstance(v, str):
                raise ValueError(f"{key!r} is not a string")
            return v

        def integer(key: str, default: int | None = None) -> int:
            v = d.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int) or abs(v) >= 2**63:
                raise ValueError(f"{key!r} is not an integer")
            return v

        def ints(key: str) -> tuple[int, ...]:
            v = d.get(key, [])
            if not isinstance(v, list) or len(v) > 1_000_000:
                raise ValueError(f"{key!r} is not a list of ranks")
            if not all(
                isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 2**31 for r in v
            ):
                raise ValueError(f"{key!r} is not a list of ranks")
            return tuple(v)

        status = text("status")
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        return cls(
            ts_ns=integer("ts_ns"),
            status=status,
            finding_id=text("finding_id"),
            kind=text("kind"),
            reason=text("reason", ""),
            ranks=ints("ranks"),
            peers=ints("peers"),
            after_step=integer("after_step", -1),
            at_step=integer("at_step", -1),
            request_id=text("request_id", ""),
            outcome=text("outcome", ""),
        )


def append(run_dir: str | Path, capture: Capture) -> None:
    """Append ``capture`` to ``run_dir``'s record (one line, flushed)."""
    line = json.dumps(capture.to_json(), allow_nan=False) + "\n"
    with (Path(run_dir) / CAPTURES_FILE).open("a", encoding="utf-8") as fh:
        fh.write(line)


def read(run_dir: str | Path) -> tuple[list[Capture], list[str]]:
    """The captures recorded in ``run_dir`` (none when there is no record) and one line per
    problem (``auto_capture.jsonl line N: why``) for what could not be read."""
    path = Path(run_dir) / CAPTURES_FILE
    if not path.is_file():
        return [], []
    problems: list[str] = []
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        return [], [f"{CAPTURES_FILE}: cannot read: {exc.strerror or exc}"]
    if len(data) > MAX_BYTES:
        problems.append(f"{CAPTURES_FILE}: over {MAX_BYTES >> 20} MiB; read the first part only")
        data = data[:MAX_BYTES]
    out: list[Capture] = []
    for n, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
            out.append(Capture.from_json(obj))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            deep = isinstance(exc, RecursionError)
            why = "nested too deeply" if deep else " ".join(str(exc).split())[:120]
            problems.append(f"{CAPTURES_FILE} line {n}: skipped ({why})")
    return out, problems


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number here")


__all__ = ["CAPTURES_FILE", "STATUSES", "Capture", "append", "read"]
