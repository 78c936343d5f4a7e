"""Memory before work (autoaug.proxy_models.memory): the estimate of one training run grows with
the pixels and the batch, a run that cannot fit is refused in one line naming the image size, the
estimate and what is available, and the regimes the presets describe on CIFAR-10 pass."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from autoaug.core.errors import UserInputError
from autoaug.proxy_models import memory
from autoaug.proxy_models.train import PRESETS, TrainConfig, eval_batch_size, train

GB = 10**9


def _estimate(
    image_size: int, batch_size: int = 32, *, train_images: int = 1024, val_images: int = 256, model: str = "resnet-8"
) -> memory.MemoryEstimate:
    config = TrainConfig(model=model, image_size=image_size, batch_size=batch_size, device="cpu")
    return memory.estimate_run_memory(
        config,
        num_classes=10,
        train_images=train_images,
        val_images=val_images,
        eval_batch_size=eval_batch_size(config),
    )


@pytest.fixture
def machine(monkeypatch):
    """Set what the machine has: ``machine(available, address_space=None)`` (bytes)."""

    def set_to(available: int | None, address_space: int | None = None) -> None:
        monkeypatch.setattr(memory, "_meminfo_available", lambda: available)
        monkeypatch.setattr(memory, "_address_space_left", lambda: address_space)

    return set_to


def test_the_estimate_grows_with_the_pixels():
    base = memory.PROCESS_BYTES
    small, double, big, bigger = (_estimate(s).total - base for s in (32, 64, 50_000, 100_000))
    # Everything but the weights scales with the pixels: 4x the pixels, (almost) 4x the bytes.
    assert 3.8 < double / small <= 4.0
    assert bigger / big == pytest.approx(4.0, rel=1e-6)
    # The decoded sets, the batches in flight and the activations all take part.
    e = _estimate(64)
    assert e.data > 0 and e.pipeline > 0 and e.model > 0


def test_the_estimate_grows_with_the_batch():
    one, two = _estimate(128, 32, val_images=0), _estimate(128, 64, val_images=0)
    assert two.pipeline == 2 * one.pipeline  # the training loader's batches in flight
    assert two.model > 1.9 * one.model  # the activations of one training batch (the weights stay)
    assert two.data == one.data  # the decoded sets do not depend on the batch
    # Validation batches are evaluation batches (at least 256 images): they count too.
    assert _estimate(128, 32, val_images=256).pipeline > one.pipeline


def test_a_set_too_large_to_decode_in_memory_is_not_counted_as_held():
    """Above the loader's in-memory limit DALI decodes batch by batch: the set is not held, the
    batches carry the decoder's buffers instead."""
    held = _estimate(256, train_images=1000, val_images=0)  # 197 MB: decoded in memory
    streamed = _estimate(256, train_images=100_000, val_images=0)  # 19.7 GB: DALI decodes
    assert held.data > 1000 * 256 * 256 * 3
    assert streamed.data < held.data
    assert streamed.pipeline > held.pipeline


def test_the_model_part_is_left_out_on_cuda():
    config = TrainConfig(image_size=64, batch_size=32, device="cpu")
    cpu = memory.estimate_run_memory(config, num_classes=10, train_images=256)
    gpu = memory.estimate_run_memory(config, num_classes=10, train_images=256, cuda=True)
    assert gpu.model == 0 < cpu.model and gpu.data == cpu.data


def test_a_run_that_cannot_fit_is_refused_in_one_line(machine):
    machine(8 * GB)
    config = TrainConfig(image_size=2048, batch_size=32, device="cpu")
    estimate = memory.estimate_run_memory(
        config, num_classes=10, train_images=1024, val_images=256, eval_batch_size=256
    )
    assert estimate.total > 8 * GB
    with pytest.raises(UserInputError) as caught:
        memory.check_memory(config, num_classes=10, train_images=1024, val_images=256, eval_batch_size=256)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("TrainConfig.image_size=2048 needs about ")
    assert f"about {memory.format_bytes(estimate.total)} per run (batch_size 32, resnet-8)" in message
    assert "but 8.0 GB is available" in message
    assert message.endswith("use a smaller image_size or batch_size")


def test_trials_at_once_are_counted_together(machine):
    """One trial fits; two at once plus the decoded data the driver holds do not."""
    config = TrainConfig(image_size=256, batch_size=32, device="cpu")
    sizes = dict(num_classes=10, train_images=1024, val_images=256, eval_batch_size=256)
    one = memory.estimate_run_memory(config, **sizes)
    machine(int(1.5 * one.total))
    assert memory.check_memory(config, **sizes) == one  # in this process: one run
    with pytest.raises(UserInputError) as caught:
        memory.check_memory(config, **sizes, runs=2, unit="trial", here=False, flags=True)
    message = str(caught.value)
    total = memory.format_bytes(2 * one.total + one.data)
    assert message.startswith(f"--image-size 256 needs about {memory.format_bytes(one.total)} per trial ")
    assert f"2 trials at once and the data decoded here: {total}" in message
    assert message.endswith("use a smaller --image-size or batch size")
    # On a cluster (no runs here) only the driver's decoded data count.
    assert memory.check_memory(config, **sizes, runs=0, here=False) == one


def test_pack_servers_count_their_members_and_the_trials_waiting_on_them(machine):
    """In packs a server holds each member's pipelines and model beside one process and its data,
    and every trial's process waits on a server: a PBA population of 16 in packs of 2 on one server
    does not fit where its 2 trials one per process do; the line names the servers, the trials'
    processes and what to change."""
    config = TrainConfig(image_size=32, batch_size=32, device="cpu")
    sizes = dict(num_classes=10, train_images=1024, val_images=256, eval_batch_size=256)
    one = memory.estimate_run_memory(config, **sizes)
    server = one.total + 15 * (one.pipeline + one.model)
    total = server + 16 * memory.WAITING_PROCESS_BYTES + one.data
    assert server > one.total and total > 2 * one.total + one.data
    machine((2 * one.total + one.data + total) // 2)  # between the two
    assert memory.check_memory(config, **sizes, runs=2, unit="trial", here=False, flags=True) == one
    fix = "a smaller population (every member's trial runs at once in packs), or --pack 1"
    with pytest.raises(UserInputError) as caught:
        memory.check_memory(
            config, **sizes, runs=1, unit="trial", here=False, flags=True, members=16, waiting=16, fix=fix
        )
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        f"1 pack of 16 trials and 16 trials' processes waiting on it need about {memory.format_bytes(total)} "
        f"({memory.format_bytes(server)} a pack: --image-size 32, batch size 32, resnet-8; 450 MB a waiting "
        "process; the data decoded here), but "
    )
    assert message.endswith(f"; use {fix}")
    with pytest.raises(UserInputError, match=r"^2 packs of 16 trials each and 32 trials' processes waiting on them"):
        memory.check_memory(config, **sizes, runs=2, unit="trial", here=False, flags=True, members=16, waiting=32)
    machine(total + 1)
    assert memory.check_memory(config, **sizes, runs=1, here=False, members=16, waiting=16) == one


def test_ulimit_v_bounds_one_process(machine):
    machine(64 * GB, address_space=GB)
    config = TrainConfig(image_size=512, batch_size=32, device="cpu")
    with pytest.raises(UserInputError, match=r"but 1\.0 GB of address space is left under ulimit -v"):
        memory.check_memory(config, num_classes=10, train_images=256)


def test_what_the_machine_has_is_read_from_proc_and_the_rlimit(monkeypatch):
    import resource

    available, address_space = memory.available_memory()
    assert available is None or available > 0
    monkeypatch.setattr(resource, "getrlimit", lambda which: (10**15, 10**15))
    assert 0 < memory.available_memory()[1] < 10**15  # the limit less this process's size
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert memory.available_memory()[1] is None


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_fits_a_small_machine_on_cifar10(preset, machine):
    """The presets' regimes on CIFAR-10 (50,000 32x32 training images, 10,000 test images) pass on
    a machine with 8 GB available (paper and final train on a GPU: their model is not host memory)."""
    machine(8 * GB)
    config = TrainConfig.from_preset(preset).resolved([5000] * 10, data_image_size=32)
    train_images = config.train_size or 50_000 - (config.val_size or 0)
    val_images = 50_000 - train_images if config.val_size is None else config.val_size
    estimate = memory.check_memory(
        config,
        num_classes=10,
        train_images=train_images,
        val_images=val_images,
        test_images=10_000,
        eval_batch_size=eval_batch_size(config),
        cuda=config.device == "cuda",
    )
    assert estimate.total < 4 * GB


def test_the_trainer_refuses_before_decoding(cifar_train, tmp_path, monkeypatch):
    """Python users get the same line from :func:`train`, before any image is decoded."""
    import autoaug.proxy_models.data as data_module

    table = pq.read_table(cifar_train)
    data = tmp_path / "d.parquet"
    pq.write_table(table.take(list(range(0, len(table), len(table) // 120))[:120]), data)

    def no_decoding(*args, **kwargs):
        raise AssertionError("an image was decoded before the memory check")

    monkeypatch.setattr(data_module, "decode_image", no_decoding)
    config = TrainConfig.from_preset("smoke", data=str(data), train_size=64, val_size=32, image_size=100_000)
    with pytest.raises(UserInputError, match=r"^TrainConfig\.image_size=100000 needs about [0-9.]+ TB per run"):
        train(config, "standard")
