"""Worked examples of what users plug into eosflow (the README's "Python transforms")."""
