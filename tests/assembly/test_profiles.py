"""Model profiles: windows, answer reserves, registration."""

from __future__ import annotations

import pytest

from contextkit.assembly import ModelProfile, ProfileError, get_profile, list_profiles, register_profile


class TestProfiles:
    def test_shipped_windows_cover_128k_to_2m(self):
        windows = {p.context_window for p in list_profiles()}
        assert {128_000, 200_000, 2_097_152} <= windows
        assert any(1_000_000 <= w < 1_100_000 for w in windows)

    def test_prompt_budget_keeps_the_answer_and_margin(self):
        p = get_profile("gpt-4o")
        assert p.prompt_budget == 128_000 - 16_384 and p.exact_tokenizer
        claude = get_profile("claude-sonnet-4")
        assert not claude.exact_tokenizer and claude.prompt_budget < 200_000 - 16_000

    def test_unknown_profile_names_the_known_ones(self):
        with pytest.raises(ProfileError, match="gpt-4o"):
            get_profile("gpt-17")

    def test_register_and_replace(self):
        mine = ModelProfile(name="test-local-model", context_window=8192, reserved_output=1024,
                            input_price_per_million=1.0)
        register_profile(mine)
        with pytest.raises(ProfileError, match="exists"):
            register_profile(mine)
        assert get_profile("test-local-model").cost(1_000_000) == 1.0

    def test_reserve_must_leave_room(self):
        with pytest.raises(ValueError, match="no room"):
            ModelProfile(name="x", context_window=100, reserved_output=100)
