"""eosflow's dev tools: the local stack, the delivery lab, the bench, the demo producer and the demo.

They import the product (eosflow), never the reverse; `pip install eosflow` does not bring them.
"""
