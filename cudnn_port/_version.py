"""The package version, in a module of its own so that modules the package imports can read it without a cycle
through ``cudnn_port/__init__.py``."""
__version__ = "0.3.0"
