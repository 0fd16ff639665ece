"""Built-in executor backends, one module each. Import the one you need."""
