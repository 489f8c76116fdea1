"""Constrained choice for generation: the words that can continue a decision's valid choices.

`choice_trie`: a trie over the token sequences of a decision point's valid choices (multi-word
values like tile factors are constrained word by word); `decoder`: a walk policy (tlm.space.design)
that writes every context itself and asks only for value words, among the allowed ones.
"""

from __future__ import annotations

from tlm.errors import TlmError

_TRIES: dict = {}  # (vocabulary, what a point's choices and their words depend on) -> trie
_TRIES_MAX = 8192


def choice_trie(point, vocab) -> dict:
    """{token id: subtrie}; a leaf holds {None: choice}. Choices with an unknown word are left out;
    words of one choice that begin another's (never: a prefix-free code) are an error, not a wrong pick.
    Tile and categorical tries depend only on the point's sizes or candidates, and every lane of a
    batch asks for the same ones: they are built once (shared, never modified: callers only read)."""
    key = None
    if point.kind == "tile":
        ctx = point.context
        key = (vocab, "tile", ctx["extent"], ctx["n"], ctx["max_innermost"])
    elif point.kind == "cat":
        key = (vocab, "cat", tuple(point.context["candidates"]))
    if key is not None and key in _TRIES:
        return _TRIES[key]
    trie = _build_trie(point, vocab)
    if key is not None:
        if len(_TRIES) >= _TRIES_MAX:
            _TRIES.clear()
        _TRIES[key] = trie
    return trie


def _build_trie(point, vocab) -> dict:
    from tlm.space.language import value_tokens

    root: dict = {}
    for choice in point.choices:
        ids = [vocab.id(w) for w in value_tokens(point, choice)]
        if None in ids:
            continue
        node = root
        for i in ids:
            if None in node:
                break
            node = node.setdefault(i, {})
        if node:  # another choice ends here or continues these words
            raise TlmError(f"ambiguous value words at {point.kind} {point.context}: {value_tokens(point, choice)}")
        node[None] = choice
    return root


def decoder(vocab, tokens: list[int], choose, total: list[float]):
    """A walk policy that appends each decision's context and value token ids to `tokens`, asking
    `choose(allowed ids)` -> (id, log-prob) where more than one word can follow (adds to total[0])."""
    from tlm.space.language import context_tokens

    def policy(point):
        tokens.extend(vocab.encode(context_tokens(point)))
        node = choice_trie(point, vocab)
        if not node:
            raise TlmError(f"no valid choice of {point.kind} {point.context} is in the model's vocabulary")
        while None not in node:
            allowed = list(node)
            tok, logp = (allowed[0], 0.0) if len(allowed) == 1 else choose(allowed)
            total[0] += logp
            tokens.append(tok)
            node = node[tok]
        return node[None]

    return policy
