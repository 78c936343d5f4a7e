"""proxy_models."""
