"""pytest-gpufabric: accept GPU servers against the machine profile they were sold with."""

__version__ = "0.1.0"
