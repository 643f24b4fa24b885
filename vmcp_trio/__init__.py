"""vmcp-trio: a production gateway for the Model Context Protocol, on Trio."""

__version__ = "0.1.0"
