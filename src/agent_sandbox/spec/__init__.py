"""The spec: models, layered loading, and the pure rules they are made of."""

from .loader import Layer, load_layer, load_spec, load_stack, parse_yaml
from .models import Spec
from .rules import ToolKind, Verdict

__all__ = ["Layer", "Spec", "ToolKind", "Verdict", "load_layer", "load_spec", "load_stack",
           "parse_yaml"]
