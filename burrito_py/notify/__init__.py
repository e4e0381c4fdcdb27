"""Notifications: what a layer event says (message.py), how it is signed (sign.py) and delivered (deliver.py)."""
