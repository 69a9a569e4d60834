"""The scheduler's passes over the IR, one module each; ``pipeline`` states their order."""
