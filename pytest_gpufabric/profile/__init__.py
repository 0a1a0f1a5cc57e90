"""Machine profiles: what was sold, as YAML validated against profile.schema.json."""
