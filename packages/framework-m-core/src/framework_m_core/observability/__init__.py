"""What a process tells its operator: events (:mod:`.observer`), Prometheus metrics
(:mod:`.metrics`), OpenTelemetry spans (:mod:`.tracing`), logs (:mod:`.logs`,
:mod:`.tracebacks`) and the health probes (:mod:`.probes`)."""
