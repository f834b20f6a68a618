"""The usage summary's arithmetic: nearest-rank percentiles and the per-model tally."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextkit.llm._summary import Tally, percentile
from contextkit.llm.monitor import UsageRecord


class TestPercentile:
    def test_known_values(self):
        values = list(range(1, 101))
        assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (50, 95, 99)
        assert percentile([], 99) == 0.0 and percentile([7.0], 50) == 7.0

    @given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=200), st.floats(1, 100))
    def test_is_an_observed_value_with_at_least_q_percent_at_or_below(self, values, q):
        value = percentile(values, q)
        assert value in values
        assert sum(v <= value for v in values) / len(values) >= q / 100 - 1e-9


class TestTally:
    def test_bounded_latencies_but_full_totals(self):
        tally = Tally(keep=3)
        for i in range(10):
            tally.add(UsageRecord(at=float(i), model="m", ok=i % 2 == 0, input_tokens=1, seconds=float(i)))
        summary = tally.summary()
        assert summary.requests == 10 and summary.successes == 5 and summary.input_tokens == 10
        assert summary.latency_seconds["p50"] == 8.0  # of the newest three: 7, 8, 9
        assert (summary.first, summary.last) == (0.0, 9.0)

    def test_cost_stays_unknown_until_one_is_known(self):
        tally = Tally()
        tally.add(UsageRecord(at=0, model="a", ok=True))
        assert tally.summary().cost_usd is None
        tally.add(UsageRecord(at=1, model="b", ok=True, cost_usd=0.25))
        assert tally.summary().cost_usd == pytest.approx(0.25)


class TestFormatCost:
    @pytest.mark.parametrize("usd, text", [(None, "?"), (0.0, "0.0000"), (1.23456, "1.2346"), (0.000597, "0.000597"),
                                           (6e-06, "6e-06")])
    def test_unknown_is_a_question_mark_and_small_costs_keep_their_digits(self, usd, text):
        from contextkit.llm._summary import format_cost

        assert format_cost(usd) == text
