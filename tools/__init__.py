"""Operator and developer tools shipped with trio-dispatch (tdbench)."""
