"""The command line, a shell like components/: may import every layer; nothing imports it.

Command-line tools (``python -m stacks <command>``) around the pure core in ``stacks/``: review and
promotion, AWS preflight, the simulated cluster, the benchmark report and the time-to-serving plan.
They read the core; the core never imports them."""
