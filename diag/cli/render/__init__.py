"""Everything a user reads, as pure functions: rich tables (:mod:`~diag.cli.render.tables`,
:mod:`~diag.cli.render.diff`, :mod:`~diag.cli.render.preflight`) and self-contained HTML pages
(:mod:`~diag.cli.render.html` with :mod:`~diag.cli.render.triage_html`,
:mod:`~diag.cli.render.diff_html`). They take typed results (findings, diffs, probe results) or a
run summary and return renderables or text; the commands print or write them.

Part of the CLI: may import any stage below; nothing but the CLI imports it.
"""
