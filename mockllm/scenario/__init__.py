"""Loading scenarios and suites: session trees, side routes, dsh's env contract."""
