"""Plain-PyTorch definitions of the zoo's models that no working library provides (random weights)."""
