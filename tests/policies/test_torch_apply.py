"""The torchvision v2 transform: input kinds, seeding, base recipe, DataLoader, errors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

from autoaug.policies import Policy, presets
from autoaug.policies.torch_apply import PolicyTransform, RandomPadCrop


@pytest.fixture(scope="module")
def chw(images64) -> torch.Tensor:
    return torch.from_numpy(images64).permute(0, 3, 1, 2).contiguous()


def test_is_a_v2_transform_seeded_by_torch(chw):
    t = presets.resolve("autoaugment-cifar10").to_torchvision(base=False)
    assert isinstance(t, v2.Transform) and isinstance(t, PolicyTransform)
    torch.manual_seed(0)
    a = [t(x) for x in chw]
    torch.manual_seed(0)
    b = [t(x) for x in chw]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert any(not torch.equal(x, y) for x, y in zip(a, chw))
    assert all(x.dtype == torch.uint8 and x.shape == (3, 32, 32) for x in a)


def test_pil_tv_tensor_batch_and_passthrough(chw, images64):
    t = PolicyTransform(Policy("inv", 10, [[("Invert", 1.0, 0)]]))
    pil = Image.fromarray(images64[0])
    out = t(pil)
    assert isinstance(out, Image.Image) and out.size == pil.size and out.mode == "RGB"
    assert np.array_equal(np.asarray(out), 255 - images64[0])
    img = tv_tensors.Image(chw[0])
    out = t(img)
    assert isinstance(out, tv_tensors.Image) and torch.equal(out, 255 - chw[0])
    batch = t(chw[:5])
    assert batch.shape == (5, 3, 32, 32) and torch.equal(batch, 255 - chw[:5])
    assert len(t.last_applied) == 5 and t.last_applied[0] == (0, ["Invert"])
    image, label = t(chw[1], 7)  # labels pass through untouched
    assert label == 7 and torch.equal(image, 255 - chw[1])
    sample = t({"image": chw[2], "label": torch.tensor(3)})
    # dict: the first plain tensor is the image (as torchvision's AutoAugment)
    assert torch.equal(sample["image"], 255 - chw[2]) and int(sample["label"]) == 3
    grey = t(chw[0][:1])  # one channel
    assert grey.shape == (1, 32, 32)


def test_identity_policy_is_a_no_op(chw):
    t = presets.resolve("none").to_torchvision()
    assert torch.equal(t(chw[0]), chw[0])


def test_base_recipe_prepends_pad_crop_and_flip(chw):
    standard = presets.resolve("autoaugment-cifar10")
    composed = standard.to_torchvision()  # the default: the base the policy was searched with
    assert isinstance(composed, v2.Compose)
    assert [type(t) for t in standard.to_torchvision(base=True).transforms] == [type(t) for t in composed.transforms]
    assert isinstance(standard.to_torchvision(base=False), PolicyTransform)
    assert [type(t) for t in composed.transforms] == [RandomPadCrop, v2.RandomHorizontalFlip, PolicyTransform]
    torch.manual_seed(1)
    out = composed(chw[0])
    assert out.shape == chw[0].shape and out.dtype == torch.uint8
    nobase = Policy("nb", 10, [[("Invert", 1.0, 0)]], base="none")
    assert isinstance(nobase.to_torchvision(base=True), PolicyTransform)
    # the crop keeps the size and only shifts by up to 4 px (zero padding)
    crop = RandomPadCrop(4)
    torch.manual_seed(2)
    shifted = [crop(chw[0]) for _ in range(20)]
    assert all(s.shape == (3, 32, 32) for s in shifted)
    assert any(not torch.equal(s, chw[0]) for s in shifted)
    pil = crop(Image.fromarray(np.asarray(chw[0].permute(1, 2, 0))))
    assert pil.size == (32, 32)


def test_pickles_without_its_previous_image(chw):
    t = PolicyTransform(Policy("sp", 10, [[("SamplePairing", 1.0, 9)]]))
    t(chw[0])
    clone = pickle.loads(pickle.dumps(t))
    assert clone.policy == t.policy and clone._previous is None


def test_in_a_dataloader_with_workers(chw):
    t = presets.resolve("randaugment:n=2,m=9").to_torchvision(base=False)

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return t(chw[i]), i

    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(Data(), batch_size=32, num_workers=2)
    batches = list(loader)
    assert [b[0].shape for b in batches] == [(32, 3, 32, 32)] * 2
    assert batches[0][0].dtype == torch.uint8


def test_errors(chw):
    t = presets.resolve("autoaugment-cifar10").to_torchvision(base=False)
    with pytest.raises(ValueError, match="expects uint8 images, got dtype torch.float32"):
        t(chw[0].float())
    with pytest.raises(
        ValueError,
        match=r"shape \[C, H, W\] or \[N, C, H, W\] with C in "
        r"\(1, 3\), got shape \(4, 32, 32\)",
    ):
        t(torch.zeros(4, 32, 32, dtype=torch.uint8))
    with pytest.raises(ValueError, match="found no image in its input"):
        t(3)
    with pytest.raises(ValueError, match="found 2 image-like inputs"):
        t(tv_tensors.Image(chw[0]), tv_tensors.Image(chw[1]))
    with pytest.raises(ValueError, match="PIL images must be mode RGB or L, got 'RGBA'"):
        t(Image.new("RGBA", (8, 8)))
    with pytest.raises(ValueError, match="policy must be a policies.Policy, got str"):
        PolicyTransform("autoaugment-cifar10")
    with pytest.raises(ValueError, match=r"interpolation='cubic'; expected one of"):
        PolicyTransform(presets.resolve("none"), interpolation="cubic")
