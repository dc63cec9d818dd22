"""pytest configuration: fixtures live in plugin modules (psycopg's layout)."""

pytest_plugins = ("tests.fix_server", "tests.fix_cli")
