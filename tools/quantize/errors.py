"""The one error the quantizer reports: bad input or settings, said in a sentence."""


class QuantizeError(Exception):
    """A problem with the source folder or the options; main() prints it and exits with 1."""
