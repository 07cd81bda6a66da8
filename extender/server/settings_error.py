"""The error a flag or environment variable of `topogang serve` with an unusable value raises."""


class SettingsError(ValueError):
    """A flag or environment variable with a value that cannot be used; names it."""


def whole_number(name: str, env: str, text: str | None, maximum: int, default: int) -> int:
    """A flag's or variable's whole number from 0 to MAXIMUM (DEFAULT when not given)."""
    if text is None:
        return default
    if not text.strip().isdigit() or int(text) > maximum:
        raise SettingsError(f"{name} ({env}): expected a whole number from 0 to {maximum}, got {text!r}")
    return int(text)
