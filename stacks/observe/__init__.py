"""Observability plans: monitors, dashboards, the Prometheus stack. May import the registry, catalog, spec and the
other plan packages."""
