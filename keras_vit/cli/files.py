"""The image files the `keras-vit` commands read and the names of what they write.

`image_files` turns the command line's images into files, a folder into the
images in it; `output_stems` names each image's outputs, the file's name
without its extension, or more of its path where two images share a name
(`cats/1.jpg` and `dogs/1.jpg` would otherwise write the same file).
`readable_chunks` reads them a chunk at a time and passes over a file that
cannot be read (`Failures` names it at once and again at the end), so that
one broken file of a folder stops nothing: the commands write the others'
results and exit with status 1 (`Failures.status`).
"""

import os
import sys
import urllib.parse

from keras_vit.tasks.images import IMAGE_SUFFIXES, URL_SCHEMES, read_images



def image_files(arguments, output=None):
    """`arguments` with each folder replaced by the image files in it.

    A folder's images (by `IMAGE_SUFFIXES`, sub-folders included) come
    sorted by path; files and http(s) URLs are kept as given.

    Args:
        arguments: the paths given on the command line.
        output: None or the command's output folder: where it lies inside
            a given folder, that folder's images leave out what is in it
            (the pictures an earlier run wrote there are no input of this one).

    Returns:
        A list of paths.

    Raises:
        ValueError: a path that is no file or folder, or a folder that
            holds no image, named.

    Example:

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> for name in ("b.png", "a.jpg", "notes.txt"):
    ...     _ = open(os.path.join(folder, name), "w")
    >>> [os.path.basename(path) for path in image_files([folder])]
    ['a.jpg', 'b.png']
    """
    files = []
    for argument in arguments:
        if argument.startswith(URL_SCHEMES):
            files.append(argument)
            continue
        if not os.path.isdir(argument):
            if not os.path.isfile(argument):  # before any image is read, not after hundreds
                raise ValueError(f"No image file at {argument!r} (resolved to {os.path.abspath(argument)!r}).")
            files.append(argument)
            continue
        # The output folder is left out when it lies inside the given one
        # (not when it is that folder: then nothing would be left).
        skip = output if output is not None and not _inside(argument, output) else None
        found = sorted(
            os.path.join(root, name)
            for root, _, names in os.walk(argument)
            if not (skip is not None and _inside(root, skip))
            for name in names
            if name.lower().endswith(IMAGE_SUFFIXES) and not name.startswith(".")
        )
        if not found:
            raise ValueError(f"The folder {argument!r} holds no image ({', '.join(IMAGE_SUFFIXES)}), "
                             "sub-folders included.")
        files += found
    return files


def _inside(folder, output):
    folder, output = os.path.realpath(folder), os.path.realpath(output)
    return os.path.commonpath([folder, output]) == output


def output_stems(paths):
    """A distinct name for each image's outputs: its file name without the
    extension, preceded by its folders where two images share a name.

    Example:

    >>> output_stems(["photos/cat.jpg", "cats/1.jpg", "dogs/1.jpg", "https://example.com/a/dog.png?s=2"])
    ['cat', 'cats_1', 'dogs_1', 'dog']
    >>> output_stems(["cat.jpg", "cat.jpg"])  # one file given twice
    ['cat', 'cat_2']
    """
    paths = [urllib.parse.urlparse(path).path if path.startswith(URL_SCHEMES) else path for path in map(str, paths)]
    stems = [os.path.splitext(os.path.basename(path))[0] or "image" for path in paths]
    counts = {stem: stems.count(stem) for stem in stems}
    shared = [i for i, stem in enumerate(stems) if counts[stem] > 1]
    if shared:
        folders = [os.path.dirname(os.path.abspath(str(paths[i]))) for i in shared]
        common = os.path.commonpath(folders)
        for i, folder in zip(shared, folders):
            parts = os.path.relpath(folder, common).split(os.sep)
            stems[i] = "_".join([part for part in parts if part not in (".", "")] + [stems[i]])
    taken = set()
    for i, stem in enumerate(stems):
        name, n = stem, 1
        while name in taken:  # the same file given twice, or names the folders still share
            n += 1
            name = f"{stem}_{n}"
        taken.add(name)
        stems[i] = name
    return stems


def in_chunks(paths, size):
    """`paths` (or any list) in consecutive lists of at most `size`: the commands read,
    run and report a chunk at a time, so that a folder of thousands of
    images is never held in memory at once and results show as they come.

    Example:

    >>> in_chunks(["a", "b", "c"], 2)
    [['a', 'b'], ['c']]
    """
    return [list(paths[i : i + size]) for i in range(0, len(paths), size)]


def named_chunks(paths, size):
    """`(path, output name)` pairs (`output_stems`) in chunks of at most `size`.

    Example:

    >>> named_chunks(["a/cat.jpg", "b/cat.jpg", "dog.png"], 2)
    [[('a/cat.jpg', 'a_cat'), ('b/cat.jpg', 'b_cat')], [('dog.png', 'dog')]]
    """
    return in_chunks(list(zip(paths, output_stems(paths))), size)


class Failures:
    """The images a command could not read or run, named as they happen (a
    line on the error stream) and together at the end (`status`).

    Example:

    >>> import contextlib, io
    >>> failures = Failures("depth")
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     failures.add("a.png", "Cannot read the image 'a.png': truncated")
    ...     status = failures.status(total=3)
    >>> status, err.getvalue().splitlines()[-2:]
    (1, ['keras-vit depth: error: 1 of 3 images failed (the results of the others are written):', '  a.png'])
    """

    def __init__(self, command):
        self.command = command
        self.paths = []

    def add(self, path, reason):
        """Records that `path` failed, and says so with `reason`."""
        self.paths.append(path)
        reason = str(reason)
        said = f": {reason}" if str(path) in reason else f" {path}: {reason}"  # read errors name their file
        print(f"keras-vit {self.command}: skipped{said}", file=sys.stderr, flush=True)

    def status(self, total):
        """0 when every image of `total` went through; else 1, the failed
        images named on the error stream."""
        if not self.paths:
            return 0
        print(f"keras-vit {self.command}: error: {len(self.paths)} of {total} images failed "
              "(the results of the others are written):", file=sys.stderr)
        for path in self.paths:
            print(f"  {path}", file=sys.stderr)
        sys.stderr.flush()
        return 1


def readable_chunks(paths, size, failures):
    """The images of `paths` read a chunk of at most `size` at a time: lists
    of `(path, output name, pixels)` (`output_stems`, `read_images`) of the
    files that could be read; each one that cannot (a broken or unknown
    file, an unreachable URL) goes to `failures` and the run goes on.

    Example:

    >>> import tempfile
    >>> from PIL import Image
    >>> folder = tempfile.mkdtemp()
    >>> Image.new("RGB", (4, 3)).save(os.path.join(folder, "good.png"))
    >>> _ = open(os.path.join(folder, "bad.png"), "w").write("not an image")
    >>> import contextlib, io
    >>> failures = Failures("depth")
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     chunks = list(readable_chunks([os.path.join(folder, n) for n in ("bad.png", "good.png")], 8, failures))
    >>> [(stem, image.shape) for _, stem, image in chunks[0]], [os.path.basename(p) for p in failures.paths]
    ([('good', (3, 4, 3))], ['bad.png'])
    >>> "keras-vit depth: skipped: Cannot read the image" in err.getvalue()
    True
    """
    for chunk in named_chunks(paths, size):
        read = []
        for path, stem in chunk:
            try:
                read.append((path, stem, read_images(path)[0]))
            except ValueError as error:
                failures.add(path, error)
        if read:
            yield read
