"""The one cache the run owns (store.Store) and how its keys and sizes are derived (keys)."""
from .keys import key_of
from .store import DEFAULT_MAX_BYTES, Store, current, held, holding, stored

__all__ = ["DEFAULT_MAX_BYTES", "Store", "current", "held", "holding", "key_of", "stored"]
