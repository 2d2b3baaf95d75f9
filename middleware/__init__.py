"""Middleware: one context concern each, composed around the model client."""

from middleware.stack import default_stack

__all__ = ["default_stack"]
