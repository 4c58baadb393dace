"""A batch checked and timed in groups: a group closes at its cap, or when the GPU's free memory would not
hold more waiting workers, and a candidate that failed its checks holds no place in its group."""

import threading

from tools.batch_groups import MemoryRoom, check_in_groups


class FakeDevice:
    """A GPU whose free memory each waiting worker takes ``per_worker`` of, until its group is timed."""

    def __init__(self, total: int = 100, per_worker: int = 10) -> None:
        self.total, self.free, self.per_worker = total, total, per_worker
        self.lock = threading.Lock()
        self.groups: list[list[int]] = [[]]

    def check(self, job: dict) -> bool:
        with self.lock:
            if job.get("fails"):
                return False
            self.free -= self.per_worker
            self.groups[-1].append(job["key"])
        return True

    def time_group(self, checked: threading.Event) -> None:
        assert checked.is_set()  # without early timing, every check of the group has ended
        self.free = self.total
        self.groups.append([])

    def room(self) -> MemoryRoom:
        return MemoryRoom(lambda: self.free, self.total)


def jobs(n: int, failing: set[int] = frozenset()) -> list[dict]:
    return [{"key": i, "fails": i in failing} for i in range(n)]


def test_a_group_closes_at_its_cap():
    device = FakeDevice(total=10**9)
    groups = check_in_groups(jobs(24), 3, 8, device.check, device.time_group, device.room)
    assert groups == 3
    assert [len(g) for g in device.groups[:-1]] == [8, 8, 8]


def test_a_group_closes_early_when_the_device_runs_short_of_memory():
    # 10% of the device is kept free, and two more workers of the group's size must fit above it: 7 here
    device = FakeDevice(total=100, per_worker=10)
    groups = check_in_groups(jobs(24), 1, 32, device.check, device.time_group, device.room)
    assert [len(g) for g in device.groups[:-1]] == [7, 7, 7, 3]
    assert groups == 4
    assert sorted(k for g in device.groups for k in g) == list(range(24))


def test_every_group_takes_a_job_even_when_no_memory_is_left():
    device = FakeDevice(total=100, per_worker=10)
    device.free = 5  # below the floor before the first job
    groups = check_in_groups(jobs(5), 2, 32, device.check, lambda _checked: device.groups.append([]), device.room)
    assert groups == 5
    assert [len(g) for g in device.groups[:-1]] == [1, 1, 1, 1, 1]


def test_a_candidate_that_failed_its_checks_frees_its_place_in_the_group():
    device = FakeDevice(total=10**9)
    failing = {1, 3, 5, 7, 9, 11}
    groups = check_in_groups(jobs(12, failing), 1, 4, device.check, device.time_group, device.room)
    assert groups == 2
    assert device.groups[:-1] == [[0, 2, 4, 6], [8, 10]]


def test_without_a_memory_room_only_the_cap_closes_a_group():
    device = FakeDevice(total=100, per_worker=10)
    groups = check_in_groups(jobs(20), 4, 16, device.check, device.time_group)
    assert groups == 2
    assert [len(g) for g in device.groups[:-1]] == [16, 4]
