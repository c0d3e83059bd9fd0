"""Progress over many images (or clicks) for the one-call task functions.

`Progress(total, verbose, unit)` is Keras' progress bar on a terminal (or
in a notebook) and plain lines elsewhere: Keras' bar redraws itself with
backspaces, carriage returns and colour codes on any POSIX system, which a
log file or a pipe keeps as they are, so where standard output is no
terminal each update that passes a tenth of the total prints one line
(`"40/100 images, 12 s"`) and the end one more. `verbose` is Keras'
`predict`'s, checked by `keras_vit.validation.check_verbose`: 0 silent,
1 progress, 2 one line at the end.
"""

import sys
import time


def on_terminal(stream=None):
    """Whether `stream` (default standard output) shows a redrawn bar: a
    terminal, or a notebook's output (which Keras' bar redraws too)."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        terminal = bool(isatty and isatty())
    except ValueError:  # a closed stream
        terminal = False
    return terminal or "ipykernel" in sys.modules


class Progress:
    """Progress of `total` steps named `unit` ("image", "click").

    Example:

    >>> import io, contextlib
    >>> out = io.StringIO()
    >>> with contextlib.redirect_stdout(out):
    ...     progress = Progress(4, verbose=1, unit="image")
    ...     for done in range(1, 5):
    ...         progress.update(done)
    >>> [line.split(",")[0] for line in out.getvalue().splitlines()]
    ['1/4 images', '2/4 images', '3/4 images', '4/4 images']
    """

    def __init__(self, total, verbose, unit):
        self.total, self.verbose, self.unit = int(total), verbose, unit
        self.start = time.monotonic()
        self.last_tenth = -1
        self.bar = None
        if verbose == 2 or (verbose == 1 and on_terminal()):
            import keras

            self.bar = keras.utils.Progbar(self.total, verbose=verbose, unit_name=unit)

    def _line(self, done):
        units = self.unit if self.total == 1 else self.unit + "s"
        return f"{done}/{self.total} {units}, {time.monotonic() - self.start:.0f} s"

    def update(self, done):
        """Records that `done` of the steps are done."""
        if not self.verbose:
            return
        if self.bar is not None:
            self.bar.update(done)
            return
        tenth = 10 * done // max(self.total, 1)
        if tenth != self.last_tenth or done >= self.total:
            self.last_tenth = tenth
            print(self._line(done), flush=True)


def predict_verbose(verbose, steps):
    """Keras' `predict` `verbose` for `steps` batches (`check_verbose`),
    its bar (1) made one plain line at the end (2) where standard output is
    no terminal.

    Example:

    >>> predict_verbose(0, 5), predict_verbose("auto", 1)
    (0, 0)
    """
    from keras_vit.validation import check_verbose

    verbose = check_verbose(verbose, steps)
    return 2 if verbose == 1 and not on_terminal() else verbose


__all__ = ["Progress", "on_terminal", "predict_verbose"]
