"""Chapter helpers: recording traces, drawing figures and widgets, and the exercises with their checkers."""
