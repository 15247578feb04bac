"""The analyzer's Prometheus metrics: the job as diag sees it, one scrape away.

Read at scrape time from what the analyzer already keeps (its ingest counters, the latest live
triage and the run summary it was computed with): a scrape runs no detector and reads no file.
Served by ``diag analyzer --metrics-port`` (and ``diag run``/``diag attach``, whose analyzer is
embedded) through :func:`diag.transport.metrics_http.serve_metrics`.

Every series has the label ``job_id`` (the run id; ``job`` is Prometheus's own, the scrape
job). Families:

- ``diag_findings`` (``cause``, ``severity``): current findings of the live triage;
- ``diag_finding_confidence`` (``id``, ``cause``, ``severity``, ``ranks``, ``hosts``): one series
  per current finding, its confidence (0-1): an alert rule can fire on it;
- ``diag_finding_detection_latency_steps`` (``id``, ``cause``): ``detected_step - onset_step``;
- ``diag_rank_straggler_score`` (``rank``, ``host``): the rank's median compute over its peers'
  (``compute_vs_peers`` of ``diag report``: 1.0 typical, 1.5 = 50% slower than its peers);
- ``diag_rank_step`` (``rank``, ``host``): the newest step stored for the rank;
- ``diag_ingest_events_total``, ``diag_ingest_duplicate_events_total``,
  ``diag_ingest_rejected_batches_total``: counters since the analyzer started (``rate()`` of the
  first is the ingest rate);
- ``diag_job_dropped_events_total`` (``reason``): events the job's hooks reported dropped;
- ``diag_triage_passes_total`` and ``diag_triage_last_seconds``: the full triage passes and how
  long the last live pass took; ``diag_triage_screened_passes_total``: live passes whose screen
  found nothing new since the last full pass (:mod:`diag.analyzer.screen`);
- ``diag_collective_fetches_total``: fetches of raw collectives the closed loop sent the node
  daemons for findings judged from their summaries (:mod:`diag.analyzer.fetch`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from diag.transport.metrics_http import DROP_REASONS, label

if TYPE_CHECKING:
    from diag.analyzer.core import AnalyzerCore


def _ints(values: Any) -> str:
    return label(",".join(str(v) for v in values))


class JobCollector:
    """Families built from ``core`` at each scrape (see the module docstring)."""

    def __init__(self, core: AnalyzerCore) -> None:
        self._core = core

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        core = self._core
        result, summary = core.latest_triage, core.latest_summary
        run: dict[str, Any] = dict(result.run) if result is not None else {}
        job = label(run.get("id") or core.store.run_dir.name)
        yield from _findings(job, result.findings if result is not None else ())
        ranks = summary.ranks if summary is not None else ()
        score = GaugeMetricFamily(
            "diag_rank_straggler_score",
            "The rank's median compute over its peers' (1.0 typical)",
            labels=("job_id", "rank", "host"),
        )
        step = GaugeMetricFamily(
            "diag_rank_step", "Newest step stored for the rank", labels=("job_id", "rank", "host")
        )
        for r in ranks:
            labels = (job, str(r.rank), label(r.host))
            if r.compute_vs_peers is not None:
                score.add_metric(labels, float(r.compute_vs_peers))
            step.add_metric(labels, float(r.last_step))
        yield score
        yield step
        counts = core.counters()
        for name, help_, key in (
            ("diag_ingest_events", "Events stored", "events"),
            ("diag_ingest_duplicate_events", "Events dropped as already stored", "duplicates"),
            ("diag_ingest_rejected_batches", "Batches refused as malformed", "rejected"),
            ("diag_triage_passes", "Full triage passes run", "passes"),
            (
                "diag_triage_screened_passes",
                "Live passes the screen answered with the last full pass's findings",
                "screened_passes",
            ),
            (
                "diag_collective_fetches",
                "Raw collectives asked back from the daemons for findings judged from summaries",
                "fetches",
            ),
        ):
            fam = CounterMetricFamily(name, help_, labels=("job_id",))
            fam.add_metric((job,), float(counts[key]))
            yield fam
        last = GaugeMetricFamily(
            "diag_triage_last_seconds", "Duration of the last triage pass", labels=("job_id",)
        )
        last.add_metric((job,), float(counts["last_triage_s"]))
        yield last
        dropped = CounterMetricFamily(
            "diag_job_dropped_events",
            "Events the job's hooks reported dropped, by reason",
            labels=("job_id", "reason"),
        )
        if summary is not None:
            info = summary.run
            named = 0
            for reason, field in DROP_REASONS:
                value = int(getattr(info, field))
                named += value
                dropped.add_metric((job, reason), value)
            dropped.add_metric((job, "other"), max(int(info.num_dropped) - named, 0))
        yield dropped


def _findings(job: str, findings: Any) -> Iterator[Metric]:
    by = GaugeMetricFamily(
        "diag_findings", "Current findings", labels=("job_id", "cause", "severity")
    )
    conf = GaugeMetricFamily(
        "diag_finding_confidence",
        "Confidence of each current finding (0-1)",
        labels=("job_id", "id", "cause", "severity", "ranks", "hosts"),
    )
    latency = GaugeMetricFamily(
        "diag_finding_detection_latency_steps",
        "Steps from a finding's onset to its detection",
        labels=("job_id", "id", "cause"),
    )
    counts: dict[tuple[str, str], int] = {}
    for f in findings:
        counts[(f.cause, f.severity)] = counts.get((f.cause, f.severity), 0) + 1
        conf.add_metric(
            (job, label(f.id), f.cause, f.severity, _ints(f.ranks), _ints(f.hosts)),
            float(f.confidence),
        )
        if f.onset_step is not None and f.detected_step is not None:
            latency.add_metric((job, label(f.id), f.cause), float(f.detected_step - f.onset_step))
    for (cause, severity), n in sorted(counts.items()):
        by.add_metric((job, cause, severity), n)
    yield from (by, conf, latency)


def job_registry(core: AnalyzerCore) -> CollectorRegistry:
    """A registry with the job's families (its own: nothing global)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(core))
    return registry
