"""How proposals go through the critic: a ruling, a revision answering it, and the batch's close.

A revision must answer every objection of the proposal it replaces (``Proposal.revises``), or it is
dropped; a proposal sent back and not revised is withdrawn; once the batch goes on (no more reviews),
what is still objected to is rejected.
"""

from __future__ import annotations

from pydantic import BaseModel

from loop.records import Decision, Review
from loop.roles import Critique

STATUS = {"approve": "approved", "revise": "revise", "reject": "rejected"}


def ruled(review: Review, critique: Critique) -> Review:
    """The review after the critic's ruling: a revision keeps the objections it answered, this
    ruling's objections follow them."""
    return review.model_copy(
        update={"status": STATUS[critique.verdict], "objections": [*review.objections, *critique.objections]}
    )


def take_revisions(
    revising: list[Review], kept: list[Review], new: list[Review]
) -> tuple[list[Review], list[Review]]:
    """(the batch to review again, the dropped): ``kept`` are the approved reviews, ``new`` one review
    per proposal of the revise round, paired with what it revises by ``proposal.revises``."""
    batch, dropped, answered = list(kept), [], set()
    for review in new:
        i = review.proposal.revises
        if i is None or not 0 <= i < len(revising) or i in answered:
            batch.append(review)
            continue
        answered.add(i)
        objections = revising[i].objections
        if len(review.proposal.answers) < len(objections):
            objections = [*objections, "unanswered objection(s): dropped"]
            dropped.append(review.model_copy(update={"status": "rejected", "objections": objections}))
        else:
            batch.append(review.model_copy(update={"objections": objections}))
    for i, item in enumerate(revising):
        if i not in answered:
            withdrawn = [*item.objections, "withdrawn"]
            dropped.append(item.model_copy(update={"status": "rejected", "objections": withdrawn}))
    return batch, dropped


class Closed(BaseModel):
    """The batch once the route after the critic is known."""

    proposals: list[Review]
    rejected: list[Review]
    critic_round: int


def close(reviews: list[Review], decision: Decision, used: int) -> Closed:
    """Without another review (``decision`` leaves for anything but propose), what is still objected
    to is rejected; a batch sent back for revision keeps what is not rejected, one rejected whole keeps
    its objections for the next proposal."""
    rejected = [r for r in reviews if r.status == "rejected"]
    again = decision.to == "propose"
    if not again:
        still = f"still objected to after {used + 1} review(s)"
        closing = {i: r.model_copy(update={"status": "rejected", "objections": [*r.objections, still]})
                   for i, r in enumerate(reviews) if r.status == "revise"}  # fmt: skip
        reviews = [closing.get(i, r) for i, r in enumerate(reviews)]
        rejected += closing.values()
    keep = [r for r in reviews if r.status != "rejected"]
    return Closed(
        proposals=keep if not again or decision.mode == "revise" else reviews,
        rejected=rejected,
        critic_round=used + 1 if again else used,
    )
