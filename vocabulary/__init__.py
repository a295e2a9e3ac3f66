"""Vocabularies shared across the layers, with no Django and no import of the project's apps."""
