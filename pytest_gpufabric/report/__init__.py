"""Views of the results: JSON for pipelines, sections for the pytest-html report."""
