"""The published report: one self-contained HTML page per run, plus PNG and SVG of each chart.

Every number and chart comes from the dbt marts (read-only), never from in-memory sweep data,
so the report shows exactly what ad-hoc SQL users can query. Vega is inlined (vl-convert's
bundle) so the page opens offline; charts are also exported with vl-convert for publishing.

Rooms: :mod:`sparkcap.publish.marts.frames` reads the marts (one night is read once, as a
:class:`~sparkcap.publish.night.NightReport`), ``charts`` turns frames into Altair specs,
``render`` writes the page and publishes it. Callers import from here.
"""

from sparkcap.errors import ReportError
from sparkcap.publish.marts.frames import load_combined, load_data, runs_of_night
from sparkcap.publish.report.charts import (
    cache_chart,
    headline_chart,
    history_chart,
    output_length_chart,
    prefill_chart,
    probe_ttft_chart,
    rate_chart,
    throughput_chart,
    ttft_chart,
)
from sparkcap.publish.report.render import (
    ReportResult,
    combined_label,
    history_changes,
    render_report,
)

__all__ = [
    "ReportError",
    "ReportResult",
    "cache_chart",
    "combined_label",
    "headline_chart",
    "history_changes",
    "history_chart",
    "load_combined",
    "load_data",
    "output_length_chart",
    "prefill_chart",
    "probe_ttft_chart",
    "rate_chart",
    "render_report",
    "runs_of_night",
    "throughput_chart",
    "ttft_chart",
]
