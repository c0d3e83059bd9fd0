"""The pictures the task commands write, checked pixel by pixel on small
images: detection tags on a filled background, apart where boxes meet;
every mask of a call and its prompts."""

import numpy as np

from conftest import runs_once
from keras_vit.tasks import pictures
from keras_vit.tasks.detection_outputs import Detection

pytestmark = runs_once("torch", "Pillow and NumPy drawing; no backend")


def test_detection_tags_are_filled_and_apart_where_boxes_meet():
    found = [Detection("cat", 0.9, (10.0, 25.0, 50.0, 60.0)),  # side by side with the dog
             Detection("dog", 0.8, (50.0, 25.0, 100.0, 60.0)),
             Detection("cat", 0.7, (12.0, 27.0, 48.0, 52.0)),  # inside the first cat
             Detection("dog", 0.6, (80.0, 0.0, 120.0, 20.0))]  # at the top edge: no room above
    picture = pictures.detections_picture(np.zeros((70, 120, 3), "uint8"), found)
    assert picture.shape == (70, 120, 3)
    colours = pictures.label_colours(found)
    texts, places = pictures.detection_tags(found, (70, 120))
    assert texts == ["cat 0.90", "dog 0.80", "cat 0.70", "dog 0.60"]
    for i, (place, detection) in enumerate(zip(places, found)):
        assert 0 <= place[0] < place[2] <= 120 and 0 <= place[1] < place[3] <= 70
        assert all(_shared(place, other) == 0 for other in places[:i]), places
        # Filled with the label's colour (its corner), the text on it (pixels of other colours).
        tag = picture[place[1]:place[3], place[0]:place[2]]
        assert tag[0, 0].tolist() == list(colours[detection.label])
        assert 0.3 < (tag == colours[detection.label]).all(-1).mean() < 0.95
    assert places[0][3] == 25 and places[2][1] >= 25 and places[3][1] >= 20
    # The boxes' lines, in their label's colour, where no tag lies.
    assert picture[55, 100].tolist() == list(colours["dog"]) and picture[55, 10].tolist() == list(colours["cat"])
    assert picture[65, 5].tolist() == [0, 0, 0]


def _shared(a, b):
    return max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1]))


def test_masks_picture_draws_every_mask_and_the_prompts():
    masks = np.zeros((3, 40, 50), bool)  # SAM's three masks of a click: nested
    masks[0, 4:36, 4:46] = True
    masks[1, 10:30, 10:40] = True
    masks[2, 15:25, 15:25] = True
    picture = pictures.masks_picture(np.zeros((40, 50, 3), "uint8"), masks, points=[(20, 20), (35, 27)],
                                     labels=[1, 0], boxes=[3, 3, 47, 37], alpha=0.5, radius=2)
    assert picture.shape == (40, 50, 3)
    colours = pictures.palette(3).astype("float64")
    # Inside each mask only, the masks blended at alpha, the largest first.
    blended = np.zeros(3)
    for i, (y, x) in enumerate([(7, 30), (12, 30), (18, 18)]):
        blended = 0.5 * blended + 0.5 * colours[i]
        assert picture[y, x].tolist() == np.round(blended).astype(int).tolist(), i
    # Each mask outlined in its colour; the clicks by label, the box.
    assert picture[10, 20].tolist() == colours[1].astype(int).tolist()
    assert picture[24, 22].tolist() == colours[2].astype(int).tolist()
    assert picture[20, 20].tolist() == list(pictures.POSITIVE) and picture[27, 35].tolist() == list(pictures.NEGATIVE)
    assert picture[3, 30].tolist() == list(pictures.BOX) and picture[1, 1].tolist() == [0, 0, 0]
