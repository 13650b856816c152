import pytest

from eosflow_dev.produce.producer import Delivery, DeliveryConfigError


@pytest.mark.parametrize(
    ("delivery", "message"),
    [
        (Delivery(acks="1"), "idempotent producer needs acks=all"),
        (Delivery(acks="2", idempotence=False), "acks must be 0, 1 or all"),
        (Delivery(transactional_id="t", idempotence=False, acks="all"), "transactions need the idempotent"),
        (Delivery(transactional_id="t", txn_size=0), "--txn-size must be at least 1"),
        (Delivery(transactional_id="t", abort_ratio=1.5), "--abort-ratio must be between 0 and 1"),
        (Delivery(abort_ratio=0.2), "--abort-ratio needs --transactional-id"),
    ],
)
def test_contradicting_settings_are_refused_with_the_reason(delivery, message):
    with pytest.raises(DeliveryConfigError, match=message):
        delivery.validate()


def test_client_config_carries_the_guarantee_settings():
    conf = Delivery(
        acks="all", idempotence=True, transactional_id="tx-1", extra={"linger.ms": "20"}
    ).client_config("127.0.0.1:1")
    assert conf["acks"] == "all"
    assert conf["enable.idempotence"] is True
    assert conf["transactional.id"] == "tx-1"
    assert conf["linger.ms"] == "20"  # -X overrides the default


def test_plain_acks_one_without_idempotence_is_allowed():
    conf = Delivery(acks="1", idempotence=False).client_config("127.0.0.1:1")
    assert conf["acks"] == "1" and conf["enable.idempotence"] is False
    assert "transactional.id" not in conf
