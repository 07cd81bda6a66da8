"""The error a flag or environment variable of `topogang serve` with an unusable value raises."""


class SettingsError(ValueError):
    """A flag or environment variable with a value that cannot be used; names it."""
