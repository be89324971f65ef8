"""Monarch actors of ``MonarchStrategy`` (``generator``, ``reference``, ``reward``, ``env``; those modules
import monarch) and the monarch-free pieces they share (``spec``, ``factory``)."""
