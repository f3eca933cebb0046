"""Lab equipment: timing and the roofline, statistical tests, deliberately broken samplers and the
benchmark."""
