"""The app's widgets, one per module, each with its `DEFAULT_CSS`: attributes down, messages up."""
