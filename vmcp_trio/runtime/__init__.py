"""Library code for processes: the supervisor of long-lived tasks, logging, metrics."""
