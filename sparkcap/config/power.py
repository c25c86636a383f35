"""Where a deployment's power draw is read, for energy per wave.

Energy is a property of the hardware, not of the OpenAI-compatible server, so it comes from
whatever already watches the hardware: a DCGM exporter or a node exporter (their Prometheus
``/metrics``), or NVML on the host that runs sparkcap. Each is optional; a deployment that
names none has no energy figures, never 0 J.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, model_validator

from sparkcap.config.base import whole_numbers

PowerKind = Literal["dcgm", "node-exporter", "nvml"]
# a sample more often than this would load the exporter more than it tells (DCGM's own field
# update interval is 100 ms at best); one a minute would leave a short wave with one reading
MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 60.0
GpuIndices = Annotated[tuple[int, ...] | None, whole_numbers("gpus must be whole GPU indices")]


class PowerSource(BaseModel):
    """The fleet file's ``power:`` of one deployment."""

    # NaN and infinity are never a setting (``interval_s: .inf`` would sample once)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: PowerKind
    url: HttpUrl | None = Field(
        None,
        description="the exporter's /metrics (dcgm, node-exporter); sent no deployment "
        "headers or key: an exporter is another service",
    )
    metric: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$",
        description="read only this series instead of the defaults: watts, or a joules counter "
        "when its name ends in _joules_total (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION: mJ)",
    )
    gpus: GpuIndices = Field(
        None,
        min_length=1,
        max_length=256,
        description="the GPU indices (DCGM's gpu label, NVML's index) to sum; None: all",
    )
    interval_s: float = Field(
        0.5, ge=MIN_INTERVAL_S, le=MAX_INTERVAL_S, description="seconds between two samples"
    )

    @model_validator(mode="after")
    def _url_fits_kind(self) -> PowerSource:
        if self.kind == "nvml":
            if self.url is not None:
                raise ValueError("nvml reads the GPUs of this host: give no url")
        elif self.url is None:
            raise ValueError(f"a {self.kind} power source needs the url of its /metrics")
        if self.url is not None and (self.url.username is not None or self.url.password):
            raise ValueError("no credentials in the power source's url")
        if self.gpus is not None and (
            any(not 0 <= g < 4096 for g in self.gpus) or len(set(self.gpus)) != len(self.gpus)
        ):
            raise ValueError("gpus must be distinct GPU indices from 0 to 4095")
        return self
