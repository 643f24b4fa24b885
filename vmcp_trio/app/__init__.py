"""Assembling processes: the only place that knows every part (see :mod:`.gateway`)."""
