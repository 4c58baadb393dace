"""The image of the arena's input region the judge keeps per input set: each input where the arena's layout
puts it, canary bytes in every guard band, and the same views read back from a copy (an entry kept on the
host)."""

from __future__ import annotations

import torch

from tools import staging


def test_the_image_is_the_inputs_at_their_arena_offsets_with_canaries_between():
    inputs = (
        torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),  # not contiguous: the arena holds a contiguous copy
        torch.tensor([7, 8, 9], dtype=torch.int64),
        torch.tensor(2.5, dtype=torch.bfloat16),  # 0-d
    )
    image, views = staging.input_image(inputs)
    specs, span = staging.packed_inputs(inputs)
    assert image.dtype == torch.uint8 and image.numel() == span
    layout = staging.Layout(inputs_bytes=span, outputs_bytes=0, log_bytes=0)
    assert specs == layout.input_specs(inputs)  # the layout a worker is told
    for spec, v, t in zip(specs, views, inputs, strict=True):
        assert torch.equal(staging.view(image, spec), t) and torch.equal(v, t) and v.is_contiguous()
    written = torch.zeros(span, dtype=torch.bool)
    for spec in specs:
        written[spec.offset : spec.offset + spec.nbytes] = True
    assert bool((image[~written] == staging.CANARY).all())  # every byte no input holds is a canary
    for start, end in layout.guards(specs):
        assert not bool(written[start:end].any())


def test_views_of_a_copied_image_read_the_same_inputs():
    inputs = (torch.randn(5, 7), torch.randn(3).to(torch.float16))
    image, _ = staging.input_image(inputs)
    copy = image.clone()
    for v, t in zip(staging.image_views(copy, inputs), inputs, strict=True):
        assert torch.equal(v, t) and v.untyped_storage().data_ptr() == copy.untyped_storage().data_ptr()
