"""The acceptance suites pytest-gpufabric ships; collected automatically when --gpu-profile is given."""
