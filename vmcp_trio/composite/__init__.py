"""Composite tools: the workflow engine (:mod:`.engine`) that runs a VirtualMCPServer's
composite tool definitions, and the template language of their steps (:mod:`.templates`,
ToolHive's Go-template syntax run in Jinja2's sandbox), which the configuration rules
(:mod:`vmcp_trio.resources.composite_plan`) also use to check the templates when they load."""
