//! Intentionally empty: this package holds the `all` integration-test binary (`tests/all`).
