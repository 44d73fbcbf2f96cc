"""The engine tests' deferred Automation API results fetch what they stand for once, and only when read."""

from lazy_results import Deferred


def test_a_deferred_value_is_fetched_on_first_read_and_kept():
    calls = []
    d = Deferred(lambda: calls.append(1) or {"frontDoorUrl": "https://models.example.com/v1"})
    assert calls == []
    assert d["frontDoorUrl"] == "https://models.example.com/v1" and "frontDoorUrl" in d and list(d) == ["frontDoorUrl"]
    assert d.get("missing") is None and len(d) == 1 and d == {"frontDoorUrl": "https://models.example.com/v1"}
    assert calls == [1]


def test_a_deferred_summary_reads_its_attributes():
    class Summary:
        result = "succeeded"
        resource_changes = {"same": 3}

    d = Deferred(Summary)
    assert d.result == "succeeded" and d.resource_changes == {"same": 3}
