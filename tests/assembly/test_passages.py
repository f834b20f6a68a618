"""Evidence hygiene: merging overlapping passages, duplicates, lost-in-the-middle order."""

from __future__ import annotations

from assembly.assembly_samples import _text
from contextkit.assembly import EvidenceItem
from contextkit.assembly.passages import Deduplicator, merge_overlapping, order_items


class TestPassages:
    def test_overlapping_and_adjacent_chunks_merge_by_offsets(self):
        doc = "One. Two. Three. Four. Five. Six."
        a = EvidenceItem(id="a", text=doc[0:14], doc_id="d", start=0, end=14, score=0.5)
        b = EvidenceItem(id="b", text=doc[10:22], doc_id="d", start=10, end=22, score=0.9)
        c = EvidenceItem(id="c", text=doc[22:33], doc_id="d", start=22, end=33, score=0.1)
        far = EvidenceItem(id="e", text="elsewhere", doc_id="other", start=0, end=9, score=0.2)
        merged, absorbed = merge_overlapping([a, b, c, far])
        # the merged passage goes by its best part: the id a model cites and the score beside it are one chunk's
        assert absorbed == {"a": "b", "c": "b"}
        whole = next(m for m in merged if m.id == "b")
        assert whole.text == doc and whole.score == 0.9 and whole.metadata["merged_ids"] == ["a", "b", "c"]
        assert whole.start == 0 and whole.end == 33

    def test_disagreeing_versions_are_not_merged(self):
        a = EvidenceItem(id="a", text="abcdef", doc_id="d", start=0, end=6)
        b = EvidenceItem(id="b", text="XYZghi", doc_id="d", start=3, end=9)
        merged, absorbed = merge_overlapping([a, b])
        assert absorbed == {} and len(merged) == 2

    def test_exact_and_near_duplicates(self):
        base = _text(1, 10)
        dedup = Deduplicator(0.8)
        assert dedup.check("x", base) is None
        assert dedup.check("y", "  " + base.upper().replace(" ", "\n ")) == ("duplicate", "x")
        near = base + " One more closing sentence about nothing."
        assert dedup.check("z", near) == ("near_duplicate", "x")
        assert dedup.check("w", _text(3, 10).replace("note 3", "other 3")) is None

    def test_lost_in_the_middle_puts_the_best_at_both_ends(self):
        items = [EvidenceItem(id=f"i{s}", text="t", score=s / 10) for s in range(1, 8)]
        ids = [it.id for it in order_items(items)]
        assert ids[0] == "i7" and ids[-1] == "i6" and ids[1] == "i5" and ids[-2] == "i4"
        assert ids[len(ids) // 2] == "i1"  # the weakest sits in the middle
        assert [it.id for it in order_items(items, "score")] == [f"i{s}" for s in range(7, 0, -1)]
