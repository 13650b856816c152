import re
from unittest import mock

from eosflow_dev.stack import kafka


def test_cluster_ids_are_kraft_shaped_and_never_look_like_an_option():
    ids = {kafka.new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", i) for i in ids)


def test_a_leading_dash_is_drawn_again():
    # 0xf8 >> 2 == 62, the base64url index of "-": the first draw would start with a dash.
    draws = iter([mock.Mock(bytes=bytes([0xF8]) + bytes(15)), mock.Mock(bytes=bytes(16))])
    with mock.patch.object(kafka.uuid, "uuid4", lambda: next(draws)):
        assert kafka.new_cluster_id() == "A" * 22
