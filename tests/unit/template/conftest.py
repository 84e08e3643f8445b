"""The template and the state machine, parsed once per module, for every test of this folder."""

from tests.unit.template.test_template import asl, template  # noqa: F401 - fixtures shared by the folder
