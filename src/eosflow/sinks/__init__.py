"""Where records land. Each sink commits its output with its positions, its own way."""
